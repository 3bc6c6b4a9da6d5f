package publish

import "time"

const (
	// ackTimeout fails an unanswered publish so its pod is retried; a
	// JetStream ack on loopback takes well under a millisecond.
	ackTimeout = 5 * time.Second
	// stallWait is how long Publish waits for a free in-flight slot before
	// giving the work back to the caller's rate-limited queue.
	stallWait = 200 * time.Millisecond
)
