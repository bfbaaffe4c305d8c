package grpcclients

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/settlement/internal/app"
)

// Only the ledger's refusal to take bank:client below zero (its
// checkOverdraft: InvalidArgument, a field violation on postings naming
// bank:client) is Unfunded; every other refusal is Rejected under its code.
func TestClassifyTellsTheBankClientShortfallFromOtherRefusals(t *testing.T) {
	invalid := func(vs ...apperr.FieldViolation) error {
		return apperr.ToStatus(&apperr.InvalidError{Violations: vs})
	}
	short := apperr.FieldViolation{Field: "postings", Reason: "bank:client would go negative in USD (balance -2.50 after this transaction): bank accounts may not be overdrawn except by a reversal"}
	for _, c := range []struct {
		name     string
		err      error
		unfunded bool
		code     string
	}{
		{"bank:client short", invalid(short), true, "Unfunded"},
		{"another account overdrawn", invalid(apperr.FieldViolation{Field: "postings", Reason: "bank:operating would go negative in USD (balance -1 after this transaction)"}), false, "InvalidArgument"},
		{"bank:client short and another field", invalid(short, apperr.FieldViolation{Field: "metadata", Reason: "bad kind"}), false, "InvalidArgument"},
		{"another field", invalid(apperr.FieldViolation{Field: "metadata", Reason: "bank:client would go negative in USD"}), false, "InvalidArgument"},
		{"the words without the violation", status.Error(codes.InvalidArgument, "bank:client would go negative in USD"), false, "InvalidArgument"},
		{"the words under another code", status.Error(codes.FailedPrecondition, "bank:client would go negative in USD"), false, "FailedPrecondition"},
		{"token without its role", status.Error(codes.PermissionDenied, "no role"), false, "PermissionDenied"},
		{"not found", status.Error(codes.NotFound, "account"), false, "NotFound"},
		{"conflict", status.Error(codes.Aborted, "key reused"), false, "Conflict"},
	} {
		err := classify("create transaction", c.err)
		if !app.IsRejected(err) || app.IsUnfunded(err) != c.unfunded || app.RefusalCode(err) != c.code {
			t.Errorf("%s: rejected %v, unfunded %v, code %s; want rejected, unfunded %v, code %s",
				c.name, app.IsRejected(err), app.IsUnfunded(err), app.RefusalCode(err), c.unfunded, c.code)
		}
	}
	if err := classify("create transaction", status.Error(codes.Unavailable, "down")); app.IsRejected(err) {
		t.Errorf("Unavailable classified Rejected: %v", err)
	}
}
