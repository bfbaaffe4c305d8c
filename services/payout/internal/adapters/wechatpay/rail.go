// Package wechatpay is payout's WeChat Pay rail (issue 17) on
// pkg/wechatpay: payouts by merchant transfer to the provider's openid
// (transfer-bills, out_bill_no derived from the rail reference), queried by
// out_bill_no before any resubmission; and the notifications of renter
// top-ups and of transfers (Notifications).
package wechatpay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	wp "github.com/gpubill/gpubill/pkg/wechatpay"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Name is the rail's name in payout histories, top-ups and notifications.
const Name = "wechatpay"

// Rail is the WeChat Pay payout rail.
type Rail struct {
	C   *wp.Client
	Log *slog.Logger
}

var _ app.Rail = (*Rail)(nil)

// Name implements app.Rail.
func (r *Rail) Name() string { return Name }

// Transfer-bill items of the payouts (scene 1005, labour remuneration).
const (
	remark     = "gpubill payout"
	perception = "劳务报酬"
	jobType    = "GPU算力提供方"
)

// Submit implements app.Rail: one transfer bill under out_bill_no =
// OutBillNo(reference). The platform answers the same bill for the same
// out_bill_no, so a resubmission after an unknown result (which the
// workflow makes only after Query found nothing) never pays twice.
func (r *Rail) Submit(ctx context.Context, t app.Transfer) (app.RailStatus, error) {
	st := app.RailStatus{Rail: Name, Reference: t.Reference}
	if t.Method.Type != domain.MethodWechat {
		return st, fmt.Errorf("wechatpay submit %s: a %s payout method: %w", t.Reference, t.Method.Type, app.ErrPermanent)
	}
	outNo, err := wp.OutBillNo(t.Reference)
	if err != nil {
		return st, fmt.Errorf("wechatpay submit: %v: %w", err, app.ErrPermanent)
	}
	if t.Currency != wp.Currency {
		st.State, st.FailureCode, st.Message = app.RailFailed, domain.FailUnsupported, "WeChat Pay transfers pay CNY only, not "+t.Currency
		return st, nil
	}
	fen, err := wp.Fen(t.Amount)
	if err != nil {
		st.State, st.FailureCode, st.Message = app.RailFailed, domain.FailInvalidAmount, err.Error()
		return st, nil
	}
	req := wp.TransferRequest{AppID: r.C.Cfg.AppID, OutBillNo: outNo, TransferSceneID: wp.TransferSceneID, OpenID: strings.TrimSpace(t.Method.WechatOpenID),
		TransferAmount: fen, TransferRemark: remark, NotifyURL: r.C.Cfg.NotifyURL, UserRecvPerception: perception,
		ReportInfos: []wp.SceneReportInfo{{InfoType: "岗位类型", InfoContent: jobType}, {InfoType: "报酬说明", InfoContent: "gpubill " + t.Reference}}}
	if name := strings.TrimSpace(t.Method.AccountName); name != "" {
		// WeChat Pay checks a name given against the account (and wants one from 2 000 yuan).
		if req.UserName, err = wp.EncryptSensitive(r.C.Cfg.PlatformKey, name); err != nil {
			return st, fmt.Errorf("wechatpay submit %s: %w", t.Reference, err)
		}
	} else if fen >= wp.UserNameMinFen {
		st.State, st.FailureCode, st.Message = app.RailFailed, domain.FailNameMismatch, "WeChat Pay transfers of 2000 yuan or more need the payee's name: account_name is empty"
		return st, nil
	}
	res, err := r.C.Transfer(ctx, req)
	if err != nil {
		var ae *wp.APIError
		if errors.As(err, &ae) && !errors.Is(err, wp.ErrUnavailable) && domain.WeChatPayFinal(ae.Code) {
			st.State = app.RailFailed
			st.FailureCode, st.Message = domain.WeChatPayFailure(ae.Code, ae.Message)
			return st, nil
		}
		// Unknown (lost, 5xx, SYSTEM_ERROR, unverifiable), or refused as
		// malformed (PARAM_ERROR, SIGN_ERROR, INVALID_REQUEST: the same
		// out_bill_no with other content, whose first bill may exist):
		// never a failure of the payout; queried and retried, logged.
		return st, fmt.Errorf("wechatpay submit %s (out_bill_no %s): %w", t.Reference, outNo, railErr(err))
	}
	if res.OutBillNo != outNo {
		return st, fmt.Errorf("wechatpay submit %s: answer names out_bill_no %q, want %s", t.Reference, res.OutBillNo, outNo)
	}
	return status(st, res.State, res.FailReason)
}

// Query implements app.Rail by out_bill_no; app.ErrUnknownReference when
// WeChat Pay has no such bill (or the reference cannot be one of ours).
func (r *Rail) Query(ctx context.Context, ref string) (app.RailStatus, error) {
	st := app.RailStatus{Rail: Name, Reference: ref}
	outNo, err := wp.OutBillNo(ref)
	if err != nil {
		return st, fmt.Errorf("wechatpay query: %v: %w", err, app.ErrUnknownReference)
	}
	bill, err := r.C.QueryTransfer(ctx, outNo)
	if err != nil {
		if wp.IsCode(err, wp.CodeNotFound) {
			return st, fmt.Errorf("wechatpay query %s: %w", ref, app.ErrUnknownReference)
		}
		return st, fmt.Errorf("wechatpay query %s (out_bill_no %s): %w", ref, outNo, railErr(err))
	}
	if bill.OutBillNo != outNo || bill.MchID != r.C.Cfg.MchID {
		return st, fmt.Errorf("wechatpay query %s: answer names out_bill_no %q of merchant %q", ref, bill.OutBillNo, bill.MchID)
	}
	st.Currency, st.Amount = wp.Currency, wp.Yuan(bill.TransferAmount) // transfer_amount: fen, always answered
	return status(st, bill.State, bill.FailReason)
}

// status maps a transfer bill's state to the rail's.
func status(st app.RailStatus, state, failReason string) (app.RailStatus, error) {
	switch state {
	case wp.StateSuccess:
		st.State = app.RailPaid
	case wp.StateAccepted, wp.StateWaitConfirm:
		st.State = app.RailAccepted
	case wp.StateProcessing, wp.StateTransfering, wp.StateCanceling:
		st.State = app.RailInTransit
	case wp.StateFail, wp.StateCancelled:
		st.State = app.RailFailed
		if failReason == "" {
			failReason = state
		}
		st.FailureCode, st.Message = domain.WeChatPayFailure(failReason, "")
	default:
		return st, fmt.Errorf("wechatpay %s: state %q: %w", st.Reference, state, app.ErrRailUnavailable)
	}
	return st, nil
}

// railErr makes pkg/wechatpay's unknown outcome the rail's (the workflow
// queries, then retries under the same reference).
func railErr(err error) error {
	if errors.Is(err, wp.ErrUnavailable) {
		return fmt.Errorf("%w (%w)", app.ErrRailUnavailable, err)
	}
	return err
}
