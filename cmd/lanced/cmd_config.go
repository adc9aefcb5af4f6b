package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/lanced-dev/lanced/internal/policy"
)

func init() {
	register(&command{
		name:    "config",
		summary: "get or set a table's config keys (set/unset commit an UpdateConfig)",
		run:     runTableConfig,
	})
}

func tableConfigUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: lanced config get URI [KEY...] [--json] [--version N]")
	fmt.Fprintln(w, "       lanced config set URI KEY=VALUE... [--force]")
	fmt.Fprintln(w, "       lanced config unset URI KEY...")
	fmt.Fprintf(w, "\n%s\n\n", commands["config"].summary)
	fmt.Fprintln(w, "set checks the lance.* keys lanced knows (type of value, misspelled keys); --force skips the check.")
	fmt.Fprintln(w, "set/unset that would change nothing commit nothing.")
}

func runTableConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		tableConfigUsage(stderr)
		return exitError{2}
	}
	if isHelpArg(args[0]) {
		tableConfigUsage(stderr)
		return flag.ErrHelp
	}
	fs := flag.NewFlagSet("config "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON (get)")
	version := fs.Uint64("version", 0, "table version to read (get; default: latest)")
	force := fs.Bool("force", false, "set lance.* keys even if lanced does not know the key or the value's type is wrong (set)")
	fs.Usage = func() { tableConfigUsage(stderr); fs.PrintDefaults() }
	pos, err := parseAnyOrder(fs, args[1:])
	if err != nil {
		return err
	}
	sub := args[0]
	if len(pos) < 1 || (sub != "get" && len(pos) < 2) {
		fs.Usage()
		return exitError{2}
	}
	set := map[string]string{}
	var unset []string
	switch sub {
	case "get":
	case "set":
		for _, kv := range pos[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				fmt.Fprintf(stderr, "lanced config set: %q is not KEY=VALUE\n", kv)
				return exitError{2}
			}
			if err := policy.CheckTableConfig(k, v); err != nil && !*force {
				fmt.Fprintf(stderr, "lanced config set: %v; nothing committed (--force sets it anyway)\n", err)
				return exitError{2}
			}
			set[k] = v
		}
	case "unset":
		unset = pos[1:]
	default:
		fmt.Fprintf(stderr, "lanced config: unknown subcommand %q\n", sub)
		tableConfigUsage(stderr)
		return exitError{2}
	}
	b, t, err := openTable(ctx, pos[0])
	if err != nil {
		return err
	}
	defer b.Close()
	if sub != "get" {
		m, committed, err := t.UpdateConfig(ctx, set, unset)
		if err != nil {
			return err
		}
		if !committed {
			fmt.Fprintf(stdout, "nothing to change: version %d already has this config; nothing committed\n", m.Version())
			return nil
		}
		fmt.Fprintf(stdout, "committed version %d\n", m.Version())
		return nil
	}
	m, _, err := loadVersion(ctx, t, pos[0], *version)
	if err != nil {
		return err
	}
	cfg := m.PB.GetConfig()
	if len(cfg) == 0 && len(pos) == 1 && !*asJSON {
		fmt.Fprintf(stdout, "table has no config (version %d)\n", m.Version())
		return nil
	}
	if len(pos) > 1 {
		only := map[string]string{}
		for _, k := range pos[1:] {
			if v, ok := cfg[k]; ok {
				only[k] = v
			}
		}
		cfg = only
	}
	if *asJSON {
		if cfg == nil {
			cfg = map[string]string{}
		}
		return json.NewEncoder(stdout).Encode(map[string]any{"version": m.Version(), "config": cfg})
	}
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(stdout, "%s=%s\n", k, cfg[k])
	}
	return nil
}
