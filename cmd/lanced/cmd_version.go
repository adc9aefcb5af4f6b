package main

import (
	"context"
	"fmt"
	"io"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func init() {
	register(&command{
		name:    "version",
		summary: "print the lanced version",
		run: func(_ context.Context, _ []string, stdout, _ io.Writer) error {
			_, err := fmt.Fprintf(stdout, "lanced %s\n", version)
			return err
		},
	})
}
