package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Router is the rail payouts go to: by the payout method's type (bank,
// alipay, wechat), else Default. A reference is followed on whichever rail
// knows it, so switching a type to another rail leaves the payouts already
// submitted on the rail that has them.
type Router struct {
	ByType  map[string]Rail
	Default Rail
	// Strict: a method type with no rail of its own is not submitted to
	// Default (the sandbox, once a real rail is on, where it would be
	// "paid" with no money leaving): its submission fails at once with
	// unsupported_by_rail, the amount back in available. Default still
	// answers for the references it holds.
	Strict bool
	// Readable rails take no payouts but are asked about references: the
	// bank-file rail's book while the file rail is off. Switched off, its
	// payouts were never asked about again: in transit for good, or, a
	// submit's answer lost, submitted again elsewhere.
	Readable []Rail
}

// Name implements Rail: the default rail's name (each status names the
// rail that answered it).
func (r Router) Name() string { return r.Default.Name() }

// RailNames are the names of the rails the router submits to or asks
// about references: those whose answers can carry a payout's status.
func (r Router) RailNames() []string {
	var out []string
	for _, rl := range r.rails() {
		out = append(out, rl.Name())
	}
	return out
}

func (r Router) rails() []Rail {
	out := []Rail{}
	seen := map[Rail]bool{}
	for _, rl := range append(append([]Rail{r.Default}, r.byTypeSorted()...), r.Readable...) {
		if rl != nil && !seen[rl] {
			seen[rl] = true
			out = append(out, rl)
		}
	}
	return out
}

func (r Router) byTypeSorted() []Rail {
	var out []Rail
	for _, t := range []string{"bank", "alipay", "wechat"} {
		if rl, ok := r.ByType[t]; ok {
			out = append(out, rl)
		}
	}
	return out
}

// Submit implements Rail: the rail of the method's type.
func (r Router) Submit(ctx context.Context, t Transfer) (RailStatus, error) {
	rl, ok := r.ByType[t.Method.Type]
	if !ok && r.Strict {
		return RailStatus{Rail: "none", Reference: t.Reference, State: RailFailed, FailureCode: domain.FailUnsupported,
			Message: fmt.Sprintf("no payout rail is configured for %s payout methods", t.Method.Type)}, nil
	}
	if !ok {
		rl = r.Default
	}
	st, err := rl.Submit(ctx, t)
	if st.Rail == "" {
		st.Rail = rl.Name()
	}
	return st, err
}

// Query implements Rail: the first rail that knows the reference answers;
// an outage of any rail that might know it leaves the outcome unknown. It
// is for a reference whose rail was not recorded (QueryOn): every rail is
// asked in turn, so one hung rail holds up every such reference.
func (r Router) Query(ctx context.Context, ref string) (RailStatus, error) {
	var down error
	for _, rl := range r.rails() {
		st, err := rl.Query(ctx, ref)
		if err == nil {
			if st.Rail == "" {
				st.Rail = rl.Name()
			}
			return st, nil
		}
		if !errors.Is(err, ErrUnknownReference) && down == nil {
			down = err
		}
	}
	if down != nil {
		return RailStatus{}, down
	}
	return RailStatus{}, fmt.Errorf("rails: %s: %w", ref, ErrUnknownReference)
}

// NoRail is the rail recorded for an attempt no rail takes (Strict, its
// method's type without a rail): its submission fails unsupported_by_rail.
const NoRail = "none"

// RailFor names the rail a payout of methodType is handed to: the gate
// records it on the attempt (Payout.SubmitRail) before it is submitted.
func (r Router) RailFor(methodType string) string {
	if rl, ok := r.ByType[methodType]; ok {
		return rl.Name()
	}
	if r.Strict {
		return NoRail
	}
	return r.Default.Name()
}

// named is the rail called name among those the router asks.
func (r Router) named(name string) (Rail, bool) {
	for _, rl := range r.rails() {
		if rl.Name() == name {
			return rl, true
		}
	}
	return nil, false
}

// QueryOn asks only rail, the one the attempt was handed to, about ref: a
// rail down or hung holds up its own payouts only (asked in turn, Alipay
// hung kept every new bank and WeChat payout from being submitted). A
// reference handed to no rail is unknown; one handed to a rail the router
// no longer has is an unknown outcome, never "unknown reference", which
// would let the caller submit it elsewhere. rail "" (an attempt from before
// rails were recorded): Query, every rail asked.
func (r Router) QueryOn(ctx context.Context, rail, ref string) (RailStatus, error) {
	switch rail {
	case "":
		return r.Query(ctx, ref)
	case NoRail:
		return RailStatus{}, fmt.Errorf("rails: %s was handed to no rail: %w", ref, ErrUnknownReference)
	}
	rl, ok := r.named(rail)
	if !ok {
		return RailStatus{}, fmt.Errorf("rail %s, handed %s, is not configured: %w", rail, ref, ErrRailUnavailable)
	}
	st, err := rl.Query(ctx, ref)
	if err == nil && st.Rail == "" {
		st.Rail = rl.Name()
	}
	return st, err
}

// SubmitTo submits t to rail, the one the attempt was handed to (and
// queried on), whatever rail its method's type maps to now (the
// configuration changed since the gate): submitted elsewhere, a rail that
// took it from an earlier try and did not say so yet would pay it too.
// rail "": Submit, by the method's type.
func (r Router) SubmitTo(ctx context.Context, rail string, t Transfer) (RailStatus, error) {
	switch rail {
	case "":
		return r.Submit(ctx, t)
	case NoRail:
		return RailStatus{Rail: NoRail, Reference: t.Reference, State: RailFailed, FailureCode: domain.FailUnsupported,
			Message: fmt.Sprintf("no payout rail is configured for %s payout methods", t.Method.Type)}, nil
	}
	rl, ok := r.named(rail)
	if !ok {
		return RailStatus{}, fmt.Errorf("rail %s, handed %s, is not configured: %w", rail, t.Reference, ErrRailUnavailable)
	}
	st, err := rl.Submit(ctx, t)
	if st.Rail == "" {
		st.Rail = rl.Name()
	}
	return st, err
}
