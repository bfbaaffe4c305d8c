package ports

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/pkg/audit"
	"github.com/gpubill/gpubill/pkg/auth"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// auditStore keeps the audit records the recorder stores.
type auditStore struct {
	mu     sync.Mutex
	stored []*eventsv1.AuditRecorded
}

func (s *auditStore) Insert(_ context.Context, _ string, recs []*eventsv1.AuditRecorded) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stored = append(s.stored, recs...)
	return nil
}

type provider struct{}

func (provider) Principal(context.Context) (auth.Principal, error) {
	return auth.Principal{Role: auth.RoleProvider, Subject: "p-001"}, nil
}
func (provider) ClientAddr(context.Context) netip.Addr { return netip.MustParseAddr("10.1.2.3") }

// The audit log records a payout account identifier masked as the payout
// service answers it: pkg/audit kept a copy of domain.Mask (a package under
// pkg imports no service's internals), free to drift from it. Through the
// recorder and the service's own answer (methodProto), for identifiers of
// multibyte characters (the service refuses them; the log records refused
// requests too) and with blanks round them, the record holds one value of
// the field: the request's masked is the answer's.
func TestAuditRecordsAMethodAsItIsAnswered(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field string
		give  *payoutv1.PutPayoutMethodRequest
		want  string
	}{
		{"alipay_id", &payoutv1.PutPayoutMethodRequest{Type: "alipay", AlipayId: "李雷@例子.中国"}, "****子.中国"},
		{"alipay_id", &payoutv1.PutPayoutMethodRequest{Type: "alipay", AlipayId: "\u3000支付宝账号一二三四\u3000"}, "****一二三四"},
		{"alipay_id", &payoutv1.PutPayoutMethodRequest{Type: "alipay", AlipayId: "密钥"}, "**"},
		{"alipay_id", &payoutv1.PutPayoutMethodRequest{Type: "alipay", AlipayId: " 13800138000 "}, "****8000"},
		{"wechat_openid", &payoutv1.PutPayoutMethodRequest{Type: "wechat", WechatOpenid: "微信用户的标识符号😀"}, "****识符号😀"},
		{"account_number", &payoutv1.PutPayoutMethodRequest{Type: "bank", AccountNumber: " 账号一二三四五六 ", BankCode: "ICBK"}, "****三四五六"},
	}
	for _, tt := range tests {
		tt.give.ProviderId, tt.give.AccountName = "p-001", "李雷"
		store := &auditStore{}
		icp := audit.New(store, slog.New(slog.DiscardHandler), "payout").UnaryInterceptor(provider{}, func(context.Context) string { return "req-1" })
		answer := func(context.Context, any) (any, error) {
			m := domain.Method{Type: tt.give.Type, AccountName: tt.give.AccountName, AccountNumber: tt.give.AccountNumber,
				AlipayID: tt.give.AlipayId, WechatOpenID: tt.give.WechatOpenid, BankCode: tt.give.BankCode}.Normalized()
			return &payoutv1.PutPayoutMethodResponse{PayoutMethod: methodProto(domain.ProviderMethod{ProviderID: "p-001", Method: m})}, nil
		}
		info := &grpc.UnaryServerInfo{FullMethod: payoutv1.PayoutService_PutPayoutMethod_FullMethodName}
		if _, err := icp(context.Background(), tt.give, info, answer); err != nil || len(store.stored) != 1 {
			t.Fatalf("%s %q: %v, %d records", tt.field, tt.want, err, len(store.stored))
		}
		var got []string
		for _, id := range store.stored[0].ResourceIds {
			if v, ok := strings.CutPrefix(id, tt.field+"="); ok {
				got = append(got, v)
			}
		}
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("%s recorded as %q, want %q alone (the service's answer)", tt.field, got, tt.want)
		}
	}
}
