package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
)

func init() {
	register(&command{
		name:    "completion",
		summary: "print a bash or zsh completion script (source <(lanced completion bash))",
		usage:   "lanced completion bash|zsh",
		run:     runCompletion,
	})
}

func runCompletion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		printUsage(stderr, commands["completion"], nil)
		return nil
	}
	if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh") {
		printUsage(stderr, commands["completion"], nil)
		return exitError{2}
	}
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	words := strings.Join(append(names, "help"), " ")
	script := `# lanced completion: commands, then files and directories (table paths).
_lanced() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "` + words + `" -- "$cur"))
    return
  fi
  case "${COMP_WORDS[1]}" in
    holds) [ "$COMP_CWORD" -eq 2 ] && { COMPREPLY=($(compgen -W "list place release" -- "$cur")); return; } ;;
    config) [ "$COMP_CWORD" -eq 2 ] && { COMPREPLY=($(compgen -W "get set unset" -- "$cur")); return; } ;;
    policy) [ "$COMP_CWORD" -eq 2 ] && { COMPREPLY=($(compgen -W "check explain" -- "$cur")); return; } ;;
    help) COMPREPLY=($(compgen -W "` + words + `" -- "$cur")); return ;;
  esac
  COMPREPLY=($(compgen -f -- "$cur"))
}
complete -o filenames -F _lanced lanced
`
	if args[0] == "zsh" {
		script = "autoload -U +X bashcompinit && bashcompinit\n" + script
	}
	_, err := fmt.Fprint(stdout, script)
	return err
}
