package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/lanced-dev/lanced/internal/engine/hold"
	"github.com/lanced-dev/lanced/internal/store"
	"github.com/lanced-dev/lanced/internal/watch"
)

func init() {
	register(&command{
		name:    "holds",
		summary: "list, place or release table holds (list ROOT|TABLE, place TABLE --reason R, release TABLE)",
		usage:   "lanced holds list ROOT|TABLE [--json]\n       lanced holds place TABLE --reason TEXT\n       lanced holds release TABLE [--reason TEXT]",
		run:     runHolds,
	})
}

// heldTable is one line of `lanced holds list`.
type heldTable struct {
	Table string `json:"table"`
	hold.Record
}

// findTables resolves a command's ROOT|TABLE argument (a local path,
// relative or absolute, or a URI) to the tables under it.
func findTables(ctx context.Context, arg string) ([]watch.Found, error) {
	found, err := watch.FindTables(ctx, store.LocalURI(arg))
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no Lance table at or under %s", store.CanonicalURI(arg))
	}
	return found, nil
}

func runHolds(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commands["holds"]
	if len(args) > 0 && isHelpArg(args[0]) {
		printUsage(stderr, c, nil)
		return flag.ErrHelp
	}
	if len(args) == 0 || (args[0] != "list" && args[0] != "place" && args[0] != "release") {
		printUsage(stderr, c, nil)
		return exitError{2}
	}
	sub := args[0]
	fs := flag.NewFlagSet("holds "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	reason := fs.String("reason", "", "why the table is held or released (recorded in the hold, printed on release)")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() { printUsage(stderr, c, fs) }
	pos, err := parseAnyOrder(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return exitError{2}
	}
	switch sub {
	case "list":
		found, err := findTables(ctx, pos[0])
		if err != nil {
			return err
		}
		var held []heldTable
		for _, f := range found {
			r, err := hold.Tables{}.Get(ctx, f.OpenURI)
			if err != nil {
				return fmt.Errorf("%s: %w", f.Table, err)
			}
			if r != nil {
				held = append(held, heldTable{Table: f.Table, Record: *r})
			}
		}
		if *asJSON {
			if held == nil {
				held = []heldTable{}
			}
			return json.NewEncoder(stdout).Encode(held)
		}
		if len(held) == 0 {
			fmt.Fprintf(stdout, "no holds (%d table(s) checked)\n", len(found))
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TABLE\tSINCE\tBY\tREASON")
		for _, h := range held {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", h.Table, h.Since.UTC().Format(time.RFC3339), dashIfEmpty(h.By), h.Reason)
		}
		return tw.Flush()
	case "place":
		if *reason == "" {
			return fmt.Errorf("holds place: --reason is required (say why the table must not be maintained)")
		}
		b, _, err := openTable(ctx, pos[0])
		if err != nil {
			return err
		}
		uri := store.CanonicalURI(pos[0])
		defer b.Close()
		if err := hold.Place(ctx, b, hold.Record{Table: uri, Reason: *reason, By: cliActor()}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "held %s: %s\n", uri, *reason)
		return nil
	default: // release
		b, _, err := openTable(ctx, pos[0])
		if err != nil {
			return err
		}
		uri := store.CanonicalURI(pos[0])
		defer b.Close()
		r, err := hold.Release(ctx, b)
		if err != nil {
			return err
		}
		if r == nil {
			fmt.Fprintf(stdout, "%s was not held\n", uri)
			return nil
		}
		fmt.Fprintf(stdout, "released %s (held since %s by %s: %s)", uri, r.Since.UTC().Format(time.RFC3339), dashIfEmpty(r.By), r.Reason)
		if *reason != "" {
			fmt.Fprintf(stdout, "; release reason: %s", *reason)
		}
		fmt.Fprintln(stdout)
		return nil
	}
}

// cliActor names a one-shot command's user in the records it writes.
func cliActor() string {
	name := "cli"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name += ":" + u.Username
	}
	if h, err := os.Hostname(); err == nil {
		name += "@" + h
	}
	return name
}
