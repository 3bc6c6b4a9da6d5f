package watch

import "sync"

// published remembers, per pod key, the fingerprint of the last state whose
// event JetStream accepted (or is accepting). It is the change filter's
// memory; losing it (a restart) only causes republishes, which JetStream
// deduplicates.
type published struct {
	mu sync.Mutex
	fp map[string]uint64
}

func newPublished() *published { return &published{fp: map[string]uint64{}} }

func (p *published) get(key string) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fp, ok := p.fp[key]
	return fp, ok
}

func (p *published) set(key string, fp uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fp[key] = fp
}

func (p *published) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.fp, key)
}

// forgetIf forgets key only if it still holds fp, so a failed publish of an
// old state does not erase a newer one.
func (p *published) forgetIf(key string, fp uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.fp[key]; ok && cur == fp {
		delete(p.fp, key)
	}
}
