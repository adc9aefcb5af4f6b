package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// hiddenFlags are accepted but left out of help output: testing aids and old
// spellings kept as aliases.
var hiddenFlags = map[string]bool{}

// hideFlag registers name as accepted but not shown in help.
func hideFlag(name string) { hiddenFlags[name] = true }

// printFlags prints fs's visible flags with their defaults.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if hiddenFlags[f.Name] {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if !strings.Contains(usage, "(default") && f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" {
			line += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintln(w, line)
	})
}

// parseFlags parses args into fs. A bad flag or value is a usage error:
// the flag package has printed it and the usage to fs's output, so it is
// exit status 2 with nothing more printed; --help is flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return exitError{2}
}

// set reports whether the flag name was given on the command line.
func set(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
