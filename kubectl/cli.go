package kubectl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/istio-aux/istio-aux/kubectl/check"
	"github.com/istio-aux/istio-aux/kubectl/explain"
	"github.com/istio-aux/istio-aux/pkg/names"
)

const usage = `kubectl istio-aux: why istio-aux does what it does to a pod, and whether its install is healthy.

Usage:
  kubectl istio-aux explain (POD... | -l SELECTOR | --all) [-n NAMESPACE] [-o text|json]
  kubectl istio-aux check [-v] [-o text|json]
  kubectl istio-aux version [--client] [-o text|json]
  kubectl istio-aux COMMAND --help

Commands:
  explain   for each pod: its opt-in, the hold, its proxy, the quit decision now
            with each app's part, what happens next, istio-aux's last Events
  check     the install, one line per part: OK, or what is wrong and the command
            that shows it
  version   the plugin's build, and the version and image of every installed
            component

` + exitCodes + `
-o json prints the report with stable field names (docs/kubectl-plugin.md).
`

// exitCodes documents the Exit* codes, in every help text.
const exitCodes = `Exit codes:
  0  all is well: every pod is quit, about to be, waited for or left to the
     kubelet (explain); every item is OK (check)
  1  something is wrong: a pod has a problem (explain), an item failed (check),
     or the cluster could not be read
  2  usage: bad flags or arguments, or no pod to explain
  3  nothing is wrong, but a pod is outside istio-aux (explain) or an item
     warns (check)
`

// Main runs kubectl istio-aux with args (the program name left out) and
// returns its exit code. connect makes the clients once the flags are read.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, connect Connector) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	switch args[0] {
	case "explain":
		return runExplain(ctx, args[1:], stdout, stderr, connect)
	case "check":
		return runCheck(ctx, args[1:], stdout, stderr, connect)
	case "version":
		return runVersion(ctx, args[1:], stdout, stderr, connect)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	fmt.Fprintf(stderr, "unknown command %q\n\n%s", args[0], usage)
	return ExitUsage
}

// common are the flags of both commands: kubectl's own (--kubeconfig,
// --context, -n, ...), the output and istio-aux's namespace.
type common struct {
	flags     *pflag.FlagSet
	rules     *clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
	output    string
	verbose   bool
	system    string
	help      bool
}

func newCommon(name string) *common {
	c := &common{rules: clientcmd.NewDefaultClientConfigLoadingRules()}
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.rules.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use")
	clientcmd.BindOverrideFlags(&c.overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
	fs.StringVarP(&c.output, "output", "o", "text", "Output format: text or json")
	fs.StringVar(&c.system, "system-namespace", names.DefaultNamespace, "The namespace istio-aux is installed in")
	fs.BoolVarP(&c.help, "help", "h", false, "Print this help")
	c.flags = fs
	return c
}

// parse reads args; a non-negative code means the command is over.
func (c *common) parse(args []string, synopsis string, stdout, stderr io.Writer) int {
	help := func(w io.Writer) {
		fmt.Fprintf(w, "%s\n\nFlags:\n%s\n%s", synopsis, c.flags.FlagUsages(), exitCodes)
	}
	if err := c.flags.Parse(args); err != nil {
		fmt.Fprintf(stderr, "%v\n\n", err)
		help(stderr)
		return ExitUsage
	}
	if c.help {
		help(stdout)
		return ExitOK
	}
	if c.output != "text" && c.output != "json" {
		fmt.Fprintf(stderr, "--output %q: want text or json\n", c.output)
		return ExitUsage
	}
	return -1
}

// clients connects with the flags read.
func (c *common) clients(connect Connector) (Clients, error) {
	return connect(clientcmd.NewNonInteractiveDeferredLoadingClientConfig(c.rules, &c.overrides))
}

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer, connect Connector) int {
	c := newCommon("explain")
	var sel explain.Selection
	c.flags.StringVarP(&sel.Selector, "selector", "l", "", "Explain the pods this label selector matches")
	c.flags.BoolVar(&sel.All, "all", false, "Explain every pod of the namespace")
	synopsis := "Usage: kubectl istio-aux explain (POD... | -l SELECTOR | --all) [-n NAMESPACE] [-o text|json]\n\n" +
		"Explains, for each pod, what istio-aux does about it and why."
	if code := c.parse(args, synopsis, stdout, stderr); code >= 0 {
		return code
	}
	names, err := podNames(c.flags.Args())
	if err == nil {
		err = choose(len(names) > 0, sel.Selector != "", sel.All)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%v\n%s\n", err, strings.SplitN(synopsis, "\n", 2)[0])
		return ExitUsage
	}
	sel.Names = names
	cl, err := c.clients(connect)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return ExitProblem
	}
	sel.Namespace = cl.Namespace
	r, err := explain.Source{Client: cl.Kube, SystemNamespace: c.system, Now: time.Now}.Report(ctx, sel)
	switch {
	case errors.Is(err, explain.ErrNoPods), apierrors.IsNotFound(err):
		fmt.Fprintln(stderr, err)
		return ExitUsage
	case err != nil:
		fmt.Fprintln(stderr, err)
		return ExitProblem
	}
	if err := write(stdout, c.output, r, func(w io.Writer) { printExplain(w, r) }); err != nil {
		fmt.Fprintln(stderr, err)
		return ExitProblem
	}
	return explainExit(r)
}

// podNames reads POD arguments, also as kubectl writes them (pod/NAME,
// pods/NAME).
func podNames(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		kind, name, ok := strings.Cut(a, "/")
		if !ok {
			kind, name = "pod", a
		}
		if kind != "pod" && kind != "pods" && kind != "po" || name == "" {
			return nil, fmt.Errorf("%q is not a pod: explain takes pod names", a)
		}
		out = append(out, name)
	}
	return out, nil
}

// choose checks that exactly one way to select pods was given.
func choose(names, selector, all bool) error {
	n := 0
	for _, b := range []bool{names, selector, all} {
		if b {
			n++
		}
	}
	switch n {
	case 0:
		return errors.New("name the pods, or give -l SELECTOR or --all")
	case 1:
		return nil
	}
	return errors.New("give pod names, -l SELECTOR or --all: only one of them")
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer, connect Connector) int {
	c := newCommon("check")
	c.flags.BoolVarP(&c.verbose, "verbose", "v", false, "Print the lists behind the counts (the watched namespaces)")
	synopsis := "Usage: kubectl istio-aux check [-v] [-o text|json]\n\nChecks istio-aux's install, one line per part."
	if code := c.parse(args, synopsis, stdout, stderr); code >= 0 {
		return code
	}
	if c.flags.NArg() > 0 {
		fmt.Fprintf(stderr, "check takes no arguments, got %q\n", c.flags.Args())
		return ExitUsage
	}
	cl, err := c.clients(connect)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return ExitProblem
	}
	r := check.Checker{Client: cl.Kube, Dynamic: cl.Dynamic, SystemNamespace: c.system, Now: time.Now}.Run(ctx)
	if err := write(stdout, c.output, r, func(w io.Writer) { printCheck(w, r, c.verbose) }); err != nil {
		fmt.Fprintln(stderr, err)
		return ExitProblem
	}
	return checkExit(r)
}
