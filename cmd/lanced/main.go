// Command lanced keeps Lance tables in object storage compact and clean.
//
// This package holds wiring and the CLI only: every subcommand lives in its own
// file (cmd_<name>.go) and registers itself with register in an init function.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand of the lanced CLI.
type command struct {
	name    string
	summary string
	// usage is the synopsis printed by printUsage (optional).
	usage string
	// run executes the command with its own arguments (after the name).
	// Output goes to stdout; diagnostics to stderr.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("lanced: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// exitError carries a process exit code without printing anything more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: lanced <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}

// isHelpArg reports whether a is a request for help.
func isHelpArg(a string) bool {
	return a == "-h" || a == "-help" || a == "--help" || a == "help"
}

// printUsage prints c's synopsis and summary, then fs's flags with their
// defaults (hidden flags left out) when fs is not nil.
func printUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	syn := c.usage
	if syn == "" {
		syn = "lanced " + c.name + " [flags]"
	}
	fmt.Fprintf(w, "usage: %s\n\n%s\n", syn, c.summary)
	if fs != nil {
		fmt.Fprintln(w, "\nflags:")
		printFlags(w, fs)
	}
}

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if args[0] == "--version" || args[0] == "-version" || args[0] == "-v" {
		args = []string{"version"}
	}
	if isHelpArg(args[0]) {
		if len(args) < 2 {
			usage(stdout)
			return 0
		}
		// lanced help CMD [SUB]: the command's own help.
		args = append(args[1:], "--help")
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "lanced: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err := taskThreadsFromEnv(); err != nil {
		fmt.Fprintf(stderr, "lanced: %v\n", err)
		return 2
	}
	defer startProfiles()()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "lanced %s: %v\n", c.name, err)
		return 1
	}
	return 0
}
