// Package readmodel is the transport-free half of a read model's consumer:
// the ports decode each inbound message into an Update, and the use case
// claims every id in the inbox inside the transaction that upserts the rows
// of the fresh ones (Fresh).
package readmodel

// Update is one inbound message for a read model: its message id and the
// row it sets. Keep false: the read model keeps nothing of it (another
// party's kind, no field it holds); its id is claimed all the same.
type Update[R any] struct {
	ID   string
	Row  R
	Keep bool
}

// IDs are the updates' message ids, in order.
func IDs[R any](ups []Update[R]) []string {
	ids := make([]string, len(ups))
	for i, u := range ups {
		ids[i] = u.ID
	}
	return ids
}

// Fresh returns the rows to keep among the updates whose ids fresh holds
// (the ids the inbox had not seen), an id twice in the batch once, and
// whether any update was fresh at all.
func Fresh[R any](ups []Update[R], fresh map[string]bool) (rows []R, anyFresh bool) {
	for _, u := range ups {
		if !fresh[u.ID] {
			continue
		}
		delete(fresh, u.ID) // the same id twice in one fetch counts once
		anyFresh = true
		if u.Keep {
			rows = append(rows, u.Row)
		}
	}
	return rows, anyFresh
}
