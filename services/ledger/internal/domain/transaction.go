package domain

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
)

// Limits on one transaction.
const (
	PostingsMax       = 1000
	MetadataKeysMax   = 64
	MetadataValueMax  = 1024
	DescriptionMax    = 1024
	IdempotencyKeyMax = 256
)

// Direction of a posting.
type Direction string

// Directions.
const (
	Debit  Direction = "debit"
	Credit Direction = "credit"
)

// TxKind says where a transaction came from.
type TxKind string

// Transaction kinds.
const (
	TxManual   TxKind = "manual"
	TxDeposit  TxKind = "deposit"
	TxCharge   TxKind = "charge"
	TxReversal TxKind = "reversal"
	// TxClientMoneyFunding is finance's entry funding a client-money
	// shortfall from the house's own money (metadata kind
	// client_money_funding; CreateTransaction gives it). A kind of its own,
	// not metadata alone: a finance entry posted before it existed could
	// name any metadata, and was recorded as the breach it then was.
	TxClientMoneyFunding TxKind = "client_money_funding"
	// TxBadDebtWriteOff is finance's entry writing off a renter's debt
	// (metadata kind bad_debt_write_off).
	TxBadDebtWriteOff TxKind = "bad_debt_write_off"
)

// Posting is one leg of a transaction.
type Posting struct {
	Account   Account
	Direction Direction
	Amount    decimal.Decimal // positive
	Currency  string          // upper-case code from pkg/money
}

// Transaction is a balanced set of postings. Once posted it never changes.
type Transaction struct {
	ID             string
	IdempotencyKey string
	RequestHash    [32]byte
	Kind           TxKind
	Description    string
	EffectiveAt    time.Time
	CreatedAt      time.Time
	Metadata       map[string]string
	Postings       []Posting
	Reverses       string // id of the reversed transaction; "" unless Kind == TxReversal
	ReversedBy     string // filled on reads
	Hash           string // chain hash (hex) once chained; filled on reads
}

// Violation is one bad field of a request.
type Violation struct {
	Field  string
	Reason string
}

// RawPosting is a posting as a client sends it.
type RawPosting struct {
	Account   string
	Direction string
	Amount    string
	Currency  string
}

// ParsePostings validates raw postings: addresses by grammar, direction,
// positive amounts with at most the currency's minor units; then checks the
// set balances per currency. It returns every violation found.
func ParsePostings(raw []RawPosting) ([]Posting, []Violation) {
	var vs []Violation
	if len(raw) < 2 {
		vs = append(vs, Violation{"postings", "a transaction needs at least two postings"})
	}
	if len(raw) > PostingsMax {
		vs = append(vs, Violation{"postings", fmt.Sprintf("at most %d postings", PostingsMax)})
		return nil, vs
	}
	out := make([]Posting, 0, len(raw))
	for i, r := range raw {
		f := func(name string) string { return fmt.Sprintf("postings[%d].%s", i, name) }
		acc, err := ParseAddress(r.Account)
		if err != nil {
			vs = append(vs, Violation{f("account"), err.Error()})
		}
		dir := Direction(strings.ToLower(strings.TrimSpace(r.Direction)))
		if dir != Debit && dir != Credit {
			vs = append(vs, Violation{f("direction"), fmt.Sprintf("%q: want debit or credit", r.Direction)})
		}
		cur, err := money.Lookup(r.Currency)
		if err != nil {
			vs = append(vs, Violation{f("currency"), err.Error()})
			continue
		}
		amt, err := cur.Parse(r.Amount)
		if err != nil {
			vs = append(vs, Violation{f("amount"), err.Error()})
			continue
		}
		if !amt.IsPositive() {
			vs = append(vs, Violation{f("amount"), fmt.Sprintf("%s must be positive", r.Amount)})
			continue
		}
		out = append(out, Posting{Account: acc, Direction: dir, Amount: amt, Currency: cur.Code})
	}
	if len(vs) > 0 {
		return nil, vs
	}
	return out, CheckBalanced(out)
}

// CheckBalanced returns one violation per currency whose debits and credits
// differ, naming the difference.
func CheckBalanced(ps []Posting) []Violation {
	diff := map[string]decimal.Decimal{}
	for _, p := range ps {
		d := diff[p.Currency]
		if p.Direction == Debit {
			diff[p.Currency] = d.Add(p.Amount)
		} else {
			diff[p.Currency] = d.Sub(p.Amount)
		}
	}
	var vs []Violation
	for _, cur := range sortedKeys(diff) {
		if d := diff[cur]; !d.IsZero() {
			side := "debits exceed credits"
			if d.IsNegative() {
				side = "credits exceed debits"
			}
			vs = append(vs, Violation{"postings", fmt.Sprintf("unbalanced in %s: %s by %s", cur, side, d.Abs().String())})
		}
	}
	return vs
}

// Effective dates a transaction may carry: the years a protobuf timestamp
// (and so every answer in JSON) can hold.
var (
	EffectiveMin = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	EffectiveMax = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

// CheckEffectiveAt refuses an effective date no answer could carry: one
// in year 10000 was stored, and every read of its transaction (and each
// page of its accounts' listings) answered 500.
func CheckEffectiveAt(t *time.Time) []Violation {
	if t == nil || (!t.Before(EffectiveMin) && !t.After(EffectiveMax)) {
		return nil
	}
	return []Violation{{Field: "effective_at", Reason: "outside 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z"}}
}

// Key prefixes the ledger gives the writes it keys itself: a deposit
// (deposit:{external_ref}) and a reversal asked without a key
// (reverse:{transaction id}).
const (
	DepositKeyPrefix  = "deposit:"
	ReversalKeyPrefix = "reverse:"
)

// CheckChosenKey refuses an idempotency key a caller chose in the ledger's
// own forms (own: the one key of that form the write may take, "" for
// none): a manual entry keyed deposit:wx-9 made the deposit wx-9 a 409 for
// good, one keyed reverse:{id} the reversal of id asked without a key.
func CheckChosenKey(key, own string) []Violation {
	if key == own || (!strings.HasPrefix(key, DepositKeyPrefix) && !strings.HasPrefix(key, ReversalKeyPrefix)) {
		return nil
	}
	return []Violation{{Field: "idempotency_key", Reason: fmt.Sprintf("keys starting %q or %q are the ledger's own (deposits, reversals asked without a key)", DepositKeyPrefix, ReversalKeyPrefix)}}
}

// CheckMetadata validates metadata limits.
func CheckMetadata(md map[string]string) []Violation {
	var vs []Violation
	if len(md) > MetadataKeysMax {
		vs = append(vs, Violation{"metadata", fmt.Sprintf("at most %d keys", MetadataKeysMax)})
	}
	for k, v := range md {
		if k == "" || len(k) > 128 {
			vs = append(vs, Violation{"metadata", fmt.Sprintf("key %q: 1-128 characters", k)})
		}
		if len(v) > MetadataValueMax {
			vs = append(vs, Violation{"metadata." + k, fmt.Sprintf("at most %d bytes", MetadataValueMax)})
		}
	}
	return vs
}

// Mirror returns the postings with every direction swapped (a reversal).
func Mirror(ps []Posting) []Posting {
	out := make([]Posting, len(ps))
	for i, p := range ps {
		q := p
		if p.Direction == Debit {
			q.Direction = Credit
		} else {
			q.Direction = Debit
		}
		out[i] = q
	}
	return out
}

// RequestHash is the SHA-256 of a canonical JSON rendering of a request: the
// same request always hashes the same however the client spelled amounts
// ("10.5" vs "10.50") or ordered metadata. A field JSON cannot encode is an
// error, never the hash of nothing (which every such request would share).
func RequestHash(kind string, fields map[string]any) ([32]byte, error) {
	b, err := json.Marshal(struct {
		Kind   string         `json:"kind"`
		Fields map[string]any `json:"fields"` // encoding/json sorts map keys
	}{kind, fields})
	if err != nil {
		return [32]byte{}, fmt.Errorf("request hash of %s: %w", kind, err)
	}
	return sha256.Sum256(b), nil
}

// CanonicalPostings renders postings for a request hash.
func CanonicalPostings(ps []Posting) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Account.Address + "|" + string(p.Direction) + "|" + p.Amount.String() + "|" + p.Currency
	}
	return out
}

// Signed returns the posting's effect on its account's normal-side balance.
func (p Posting) Signed() decimal.Decimal {
	if p.Account.DebitNormal() == (p.Direction == Debit) {
		return p.Amount
	}
	return p.Amount.Neg()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
