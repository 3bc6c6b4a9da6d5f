package kubectl

import (
	"github.com/istio-aux/istio-aux/kubectl/check"
	"github.com/istio-aux/istio-aux/kubectl/explain"
)

// Exit codes, for scripts (the help text documents them).
const (
	// ExitOK: explain: every pod is handled (quit, to be quit, waited
	// for, or left to the kubelet); check: every item is OK.
	ExitOK = 0
	// ExitProblem: explain: a pod has a problem; check: an item failed;
	// either: the cluster could not be read.
	ExitProblem = 1
	// ExitUsage: bad flags or arguments, or no pod to explain.
	ExitUsage = 2
	// ExitAttention: nothing is wrong, but explain found a pod istio-aux
	// does not handle, or check a warning.
	ExitAttention = 3
)

// explainExit is the exit code of an explain report.
func explainExit(r explain.Report) int {
	code := ExitOK
	for _, p := range r.Pods {
		switch p.Verdict {
		case explain.VerdictProblem:
			return ExitProblem
		case explain.VerdictOutside:
			code = ExitAttention
		}
	}
	return code
}

// checkExit is the exit code of a check report.
func checkExit(r check.Report) int {
	switch r.Worst() {
	case check.StatusFail:
		return ExitProblem
	case check.StatusWarn:
		return ExitAttention
	}
	return ExitOK
}
