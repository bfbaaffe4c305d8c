package postgres

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// readAuditRecords reads the audit log's next page of records after seq
// after, in seq order.
func readAuditRecords(ctx context.Context, q Querier, after int64) ([]domain.StoredAuditEvent, error) {
	rows, err := q.Query(ctx, `select seq, event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr,
			stored_at, prev_hash, hash
		from ledger.audit_events where seq > $1 order by seq limit $2`, after, chainBatchMax)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.StoredAuditEvent, error) {
		var e domain.StoredAuditEvent
		err := r.Scan(&e.Seq, &e.EventID, &e.At, &e.Service, &e.Method, &e.Actor, &e.Role, &e.ResourceIDs, &e.RequestID,
			&e.Code, &e.ClientAddr, &e.StoredAt, &e.PrevHash, &e.Hash)
		return e, err
	})
}

// verifyAudit walks the audit log's chain in seq order, recomputing every
// record's hash from its content and its predecessor's hash, and names the
// first record that does not verify: one edited (its content), moved to
// another seq (the seq is hashed, and its prev_hash names another
// predecessor), or the seq of a record deleted (its successor's prev_hash
// names it). Seqs are consecutive since migration ledger/0030; before it
// a failed COPY skipped numbers, so a gap alone proves nothing, the
// broken link does. The last records deleted leave a shorter chain that
// verifies: the head verify prints is what an auditor keeps to tell
// (ledger verify --audit-head, AuditRecordHash).
func verifyAudit(ctx context.Context, q Querier, res VerifyResult) (VerifyResult, error) {
	prev, last := domain.AuditGenesisHash, int64(0)
	res.AuditHeadHash = hex.EncodeToString(prev)
	for {
		recs, err := readAuditRecords(ctx, q, last)
		if err != nil {
			return res, err
		}
		if len(recs) == 0 {
			return res, nil
		}
		for _, e := range recs {
			bad := func(seq int64, reason string) (VerifyResult, error) {
				res.OK, res.FirstBadAuditSeq, res.Reason = false, seq, reason
				return res, nil
			}
			if !bytes.Equal(e.PrevHash, prev) {
				if e.Seq == last+2 {
					return bad(last+1, fmt.Sprintf("audit record %d was deleted: record %d's prev_hash is not the hash of %d "+
						"(ledger.audit_events altered)", last+1, e.Seq, last))
				}
				if e.Seq > last+2 {
					return bad(last+1, fmt.Sprintf("a record of seq %d to %d was deleted: record %d's prev_hash is not the hash of %d "+
						"(ledger.audit_events altered)", last+1, e.Seq-1, e.Seq, last))
				}
				return bad(e.Seq, fmt.Sprintf("audit record %d: prev_hash is not the hash of the record before it (%d): "+
					"records moved or replaced (ledger.audit_events altered)", e.Seq, last))
			}
			if h := domain.AuditHash(prev, e); !bytes.Equal(h, e.Hash) {
				return bad(e.Seq, fmt.Sprintf("audit record %d (event %s): content no longer matches its hash (ledger.audit_events altered)",
					e.Seq, e.EventID))
			}
			prev, last = e.Hash, e.Seq
			res.AuditChecked++
			res.AuditHeadSeq, res.AuditHeadHash = e.Seq, hex.EncodeToString(e.Hash)
		}
	}
}

// AuditRecordHash is the hex hash of the audit record at seq, and whether
// there is one.
func AuditRecordHash(ctx context.Context, q Querier, seq int64) (string, bool, error) {
	var h []byte
	err := q.QueryRow(ctx, `select hash from ledger.audit_events where seq = $1`, seq).Scan(&h)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the audit record at %d: %w", seq, err)
	}
	return hex.EncodeToString(h), true, nil
}
