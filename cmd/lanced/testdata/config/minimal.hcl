tables = ["tables"]
