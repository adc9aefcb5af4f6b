package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lanced-dev/lanced/internal/status"
)

func init() {
	register(&command{
		name:    "status",
		summary: "show every table's health, holds, queue and recent errors: from a running daemon, or from the tables under ROOT|TABLE",
		usage:   "lanced status [--http HOST:PORT] [--json]\n       lanced status ROOT|TABLE [--policy DIR] [--json]",
		run:     runStatus,
	})
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("http", "127.0.0.1:9464", "the daemon's HTTP address (its --http), when no ROOT|TABLE is given")
	fs.StringVar(addr, "addr", "127.0.0.1:9464", "old spelling of --http")
	hideFlag("addr")
	policyDir := fs.String("policy", "", "policy directory, for the small-fragment threshold (with ROOT|TABLE)")
	asJSON := fs.Bool("json", false, "print JSON (the daemon's /api/status document)")
	fs.Usage = func() { printUsage(stderr, commands["status"], fs) }
	pos, err := parseAnyOrder(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fs.Usage()
		return exitError{2}
	}
	var snap status.Snapshot
	if len(pos) == 0 {
		if snap, err = fetchStatus(ctx, *addr); err != nil {
			return err
		}
	} else {
		set, err := loadPolicyDir(*policyDir, stderr)
		if err != nil {
			return err
		}
		found, err := findTables(ctx, pos[0])
		if err != nil {
			return err
		}
		snap = status.Snapshot{Generated: time.Now().UTC(), Ready: "ok", Queue: status.Queue{}}
		for _, f := range found {
			t, err := status.ReadTable(ctx, f.Table, f.OpenURI, func(cfg map[string]string) uint64 {
				return uint64(set.Resolve(f.Table, cfg).Compaction.TargetRowsPerFragment.Value)
			})
			if err != nil {
				t.Err = err.Error()
			}
			snap.Tables = append(snap.Tables, t)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(snap)
	}
	printStatus(stdout, snap, len(pos) == 0)
	for _, t := range snap.Tables {
		if t.Err != "" {
			return exitError{1}
		}
	}
	return nil
}

func fetchStatus(ctx context.Context, addr string) (status.Snapshot, error) {
	var s status.Snapshot
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+"/api/status", nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, fmt.Errorf("no daemon answers at %s (%v): start one with lanced run, pass its address with --http, or give a table or root: lanced status ./tables", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("%s/api/status: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("%s/api/status: %w", url, err)
	}
	return s, nil
}

func printStatus(w io.Writer, s status.Snapshot, daemon bool) {
	if daemon {
		fmt.Fprintf(w, "daemon %s (lanced %s), ready: %s\n", s.Node, s.Version, s.Ready)
		for _, r := range s.Roots {
			state := "ok"
			switch {
			case r.Err != "":
				state = "ERROR " + r.Err
			case !r.Succeeded:
				state = "not swept yet"
			}
			fmt.Fprintf(w, "root %s: %d tables, %s\n", r.URI, r.Tables, state)
		}
		fmt.Fprintf(w, "queue: %g pending, %g running, %g dead letters; %d lease(s)\n", s.Queue.Pending, s.Queue.Running, s.Queue.DeadLetters, len(s.Leases))
		for _, rt := range s.Running {
			eta := rt.ETA
			if eta == "" {
				eta = "-"
			}
			fmt.Fprintf(w, "running %s: %.1f%%, %d/%d rows, %s/%s, eta %s\n", rt.ID, rt.Percent, rt.RowsDone, rt.RowsTotal,
				status.HumanBytes(rt.BytesDone), status.HumanBytes(rt.BytesTotal), eta)
		}
	}
	for _, t := range s.Tables {
		line := t.Summary()
		if t.Hold != nil {
			line += fmt.Sprintf("; HELD since %s by %s: %s", t.Hold.Since.UTC().Format(time.RFC3339), dashIfEmpty(t.Hold.By), t.Hold.Reason)
		}
		if t.Err != "" {
			line += "; ERROR " + t.Err
		}
		fmt.Fprintln(w, line)
	}
	if len(s.Tables) == 0 {
		fmt.Fprintln(w, "no tables")
	}
	for i, e := range s.Errors {
		if i == 10 {
			break
		}
		fmt.Fprintf(w, "error %s %s %s %s\n", e.Time.Format(time.RFC3339), dashIfEmpty(e.Table), e.Msg, e.Detail)
	}
}
