package format

import "strings"

// DataDir holds a table's data files, relative to its root.
const DataDir = "data"

// IndicesDir holds a table's index files, relative to its root.
const IndicesDir = "_indices"

// DataFileKey is the store key of a data file whose manifest path is path.
func DataFileKey(path string) string { return DataDir + "/" + path }

// TableDirs are the directories Lance writes a table's files in (versions,
// transactions, data, indices, deletions), each with a trailing slash.
// Cleanup lists and deletes only inside them, as lance 8.0.0 does.
var TableDirs = []string{VersionsDir + "/", TransactionsDir + "/", DataDir + "/", IndicesDir + "/", DeletionsDir + "/"}

// InTableDirs reports whether key lies in one of TableDirs.
func InTableDirs(key string) bool {
	for _, d := range TableDirs {
		if strings.HasPrefix(key, d) {
			return true
		}
	}
	return false
}
