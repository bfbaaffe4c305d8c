package tax

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/auth"
	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
)

// A gross of 10^18 or more is refused as too large, not as "want a
// non-negative amount": the refusal said nothing of its size, so a
// settlement of such a sum failed with a reason that read as a sign or
// format fault. A commission money.Parse refuses says why too.
func TestAmountTooLargeSaysSo(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t)
	big := "1000000000000000000" // 10^18 yuan
	compute := func(gross, commission string) error {
		_, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), &taxv1.ComputeWithholdingRequest{ProviderId: "p-big", CycleId: "cyc-20260101",
			Currency: "CNY", Gross: gross, Commission: commission, TaxProfile: "individual", Jurisdiction: "CN", IdempotencyKey: "k-big-" + gross + commission})
		return err
	}
	quote := func(gross string) error {
		_, err := s.api.QuoteWithholding(as(auth.RoleAdmin, ""), &taxv1.QuoteWithholdingRequest{Currency: "CNY", Gross: gross,
			CommissionRate: "0.25", TaxProfile: "individual", Jurisdiction: "CN",
			UsageEnd: timestamppb.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))})
		return err
	}
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"compute, gross 10^18", compute(big, "0"), "too large"},
		{"compute, gross 1e64", compute("1e64", "0"), "too large"},
		{"quote, gross 10^18", quote(big), "too large"},
		{"compute, gross negative", compute("-1.00", "0"), "non-negative"},
		{"compute, gross 3 decimals", compute("1.001", "0"), "more than 2 decimal places"},
		{"compute, commission 3 decimals", compute("100.00", "1.001"), "more than 2 decimal places"},
	} {
		if code(tt.err) != codes.InvalidArgument || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: %v; want InvalidArgument saying %q", tt.name, tt.err, tt.want)
		}
	}
}
