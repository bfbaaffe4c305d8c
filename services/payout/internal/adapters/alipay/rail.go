package alipay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/shopspring/decimal"

	ap "github.com/gpubill/gpubill/pkg/alipay"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Package alipay is payout's Alipay rail on pkg/alipay: payouts
// by the single transfer API, out_biz_no = the rail reference, queried by
// it before any resubmission; and the payment notifications of renter
// top-ups (Notifications).

// Name is the rail's name in payout histories and notifications.
const Name = "alipay"

// Rail is the Alipay payout rail.
type Rail struct {
	C   *ap.Client
	Log *slog.Logger
}

var _ app.Rail = (*Rail)(nil)

// Name implements app.Rail.
func (r *Rail) Name() string { return Name }

// Payee builds payee_info from a payout method: a 2088… user id is paid by
// id; a phone number or e-mail by logon id, with the holder's name (Alipay
// checks it against the account).
func Payee(m domain.Method) (ap.PayeeInfo, error) {
	id := strings.TrimSpace(m.AlipayID)
	if ap.IsUserID(id) {
		return ap.PayeeInfo{Identity: id, IdentityType: ap.IdentityUserID, Name: strings.TrimSpace(m.AccountName)}, nil
	}
	if strings.TrimSpace(m.AccountName) == "" {
		return ap.PayeeInfo{}, fmt.Errorf("an Alipay logon id (phone or e-mail) is paid only with the holder's name: account_name is empty")
	}
	return ap.PayeeInfo{Identity: id, IdentityType: ap.IdentityLogonID, Name: strings.TrimSpace(m.AccountName)}, nil
}

// Submit implements app.Rail: one transfer under out_biz_no = the
// reference. The platform answers the same order for the same out_biz_no,
// so a resubmission after an unknown result (which the workflow makes only
// after Query found nothing) never pays twice.
func (r *Rail) Submit(ctx context.Context, t app.Transfer) (app.RailStatus, error) {
	st := app.RailStatus{Rail: Name, Reference: t.Reference}
	if t.Method.Type != domain.MethodAlipay {
		return st, fmt.Errorf("alipay submit %s: a %s payout method: %w", t.Reference, t.Method.Type, app.ErrPermanent)
	}
	if t.Currency != ap.Currency {
		st.State, st.FailureCode, st.Message = app.RailFailed, domain.FailUnsupported, "Alipay transfers pay CNY only, not "+t.Currency
		return st, nil
	}
	payee, err := Payee(t.Method)
	if err != nil {
		st.State, st.FailureCode, st.Message = app.RailFailed, domain.FailInvalidAccount, err.Error()
		return st, nil
	}
	biz := ap.TransferBiz{OutBizNo: t.Reference, TransAmount: t.Amount.StringFixed(2), ProductCode: ap.ProductTransfer, BizScene: ap.SceneDirect,
		OrderTitle: "gpubill payout", PayeeInfo: payee, Remark: "gpubill payout " + t.Reference}
	if r.C.Cfg.PayerShowName != "" {
		b, err := json.Marshal(map[string]string{"payer_show_name": r.C.Cfg.PayerShowName})
		if err != nil {
			return st, fmt.Errorf("alipay submit %s: business_params: %w", t.Reference, err)
		}
		biz.BusinessParams = string(b)
	}
	obj, com, err := r.C.Call(ctx, ap.MethodTransfer, biz)
	if err != nil {
		return st, fmt.Errorf("alipay submit %s: %w", t.Reference, railErr(err))
	}
	switch {
	case com.Code == ap.CodeSuccess:
		var res ap.TransferResult
		if err := json.Unmarshal(obj, &res); err != nil {
			return st, fmt.Errorf("alipay submit %s: answer: %v: %w", t.Reference, err, app.ErrRailUnavailable)
		}
		if res.OutBizNo != t.Reference {
			return st, fmt.Errorf("alipay submit %s: answer names out_biz_no %q", t.Reference, res.OutBizNo)
		}
		return r.status(st, res.Status, "", "")
	case com.Code == ap.CodeBusiness && domain.AlipayUnknown(com.SubCode):
		return st, fmt.Errorf("alipay submit %s: %s: %w", t.Reference, com, app.ErrRailUnavailable)
	case com.Code == ap.CodeBusiness && com.SubCode != ap.SubInfoInconsistent:
		st.State = app.RailFailed
		st.FailureCode, st.Message = domain.AlipayFailure(com.SubCode, com.SubMsg)
		return st, nil
	}
	// A request the gateway refused (40001 missing parameter, 40002
	// invalid parameter or signature, 40006 no permission) or an
	// inconsistent resubmission: nothing to fail the payout on; retried
	// and logged until it is fixed.
	return st, fmt.Errorf("alipay submit %s: refused: %s", t.Reference, com)
}

// Query implements app.Rail by out_biz_no; app.ErrUnknownReference when
// Alipay has no such order.
func (r *Rail) Query(ctx context.Context, ref string) (app.RailStatus, error) {
	st := app.RailStatus{Rail: Name, Reference: ref}
	obj, com, err := r.C.Call(ctx, ap.MethodQuery, ap.QueryBiz{ProductCode: ap.ProductTransfer, BizScene: ap.SceneDirect, OutBizNo: ref})
	if err != nil {
		return st, fmt.Errorf("alipay query %s: %w", ref, railErr(err))
	}
	switch {
	case com.Code == ap.CodeBusiness && com.SubCode == ap.SubOrderNotExist:
		return st, fmt.Errorf("alipay query %s: %w", ref, app.ErrUnknownReference)
	case com.Code == ap.CodeBusiness && domain.AlipayUnknown(com.SubCode):
		return st, fmt.Errorf("alipay query %s: %s: %w", ref, com, app.ErrRailUnavailable)
	case com.Code != ap.CodeSuccess:
		return st, fmt.Errorf("alipay query %s: refused: %s", ref, com)
	}
	var res ap.QueryResult
	if err := json.Unmarshal(obj, &res); err != nil {
		return st, fmt.Errorf("alipay query %s: answer: %v: %w", ref, err, app.ErrRailUnavailable)
	}
	if res.OutBizNo != ref {
		return st, fmt.Errorf("alipay query %s: answer names out_biz_no %q", ref, res.OutBizNo)
	}
	// trans_amount is the order's amount in yuan (optional in the answer:
	// without it the amount is not reported).
	if res.TransAmount != "" {
		amt, err := decimal.NewFromString(res.TransAmount)
		if err != nil {
			return st, fmt.Errorf("alipay query %s: trans_amount %q: %v: %w", ref, res.TransAmount, err, app.ErrRailUnavailable)
		}
		st.Currency, st.Amount = ap.Currency, amt
	}
	return r.status(st, res.Status, res.ErrorCode, res.FailReason)
}

// status maps a transfer's status to the rail's state.
func (r *Rail) status(st app.RailStatus, status, errCode, reason string) (app.RailStatus, error) {
	switch status {
	case "SUCCESS":
		st.State = app.RailPaid
	case "DEALING":
		st.State = app.RailInTransit
	case "WAIT_PAY", "INIT":
		st.State = app.RailAccepted
	case "FAIL", "CLOSED":
		st.State = app.RailFailed
		if errCode == "" {
			errCode = status
		}
		st.FailureCode, st.Message = domain.AlipayFailure(errCode, reason)
	case "REFUND": // paid to a bank card, then bounced
		st.State = app.RailReturned
		if errCode == "" {
			errCode = status
		}
		st.FailureCode, st.Message = domain.AlipayFailure(errCode, reason)
	default:
		return st, fmt.Errorf("alipay %s: status %q: %w", st.Reference, status, app.ErrRailUnavailable)
	}
	return st, nil
}

// railErr makes pkg/alipay's unknown outcome the rail's (the workflow
// queries, then retries under the same reference).
func railErr(err error) error {
	if errors.Is(err, ap.ErrUnavailable) {
		return fmt.Errorf("%w (%w)", app.ErrRailUnavailable, err)
	}
	return err
}
