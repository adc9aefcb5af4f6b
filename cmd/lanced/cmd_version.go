package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=..."; without
// it the module version or the VCS revision from the build info is used.
var version = "dev"

// buildInfo is what `lanced version` prints and lanced_build_info carries.
type buildInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Modified  bool   `json:"modified"`
	BuildTime string `json:"build_time"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

func readBuildInfo() buildInfo {
	bi := buildInfo{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return bi
	}
	if bi.Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		bi.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			bi.Revision = s.Value
		case "vcs.time":
			bi.BuildTime = s.Value
		case "vcs.modified":
			bi.Modified = s.Value == "true"
		}
	}
	return bi
}

func init() {
	register(&command{
		name:    "version",
		summary: "print the lanced version and build info (also: lanced --version)",
		usage:   "lanced version [--json]",
		run: func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			fs := flag.NewFlagSet("version", flag.ContinueOnError)
			fs.SetOutput(stderr)
			asJSON := fs.Bool("json", false, "print JSON")
			fs.Usage = func() { printUsage(stderr, commands["version"], fs) }
			if err := parseFlags(fs, args); err != nil {
				return err
			}
			bi := readBuildInfo()
			if *asJSON {
				return json.NewEncoder(stdout).Encode(bi)
			}
			rev := bi.Revision
			if rev == "" {
				rev = "unknown"
			} else if len(rev) > 12 {
				rev = rev[:12]
			}
			if bi.Modified {
				rev += "+dirty"
			}
			_, err := fmt.Fprintf(stdout, "lanced %s (revision %s, built %s, %s, %s)\n", bi.Version, rev, dashIfEmpty(bi.BuildTime), bi.GoVersion, bi.Platform)
			return err
		},
	})
}
