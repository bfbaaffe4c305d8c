package outbox

import "context"

// PrunePublished runs one pruning round (the relay runs one every
// publishedPruneEach).
func (r *Relay) PrunePublished(ctx context.Context) error { return r.prunePublished(ctx) }
