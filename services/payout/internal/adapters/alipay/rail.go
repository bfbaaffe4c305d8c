package alipay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Name is the rail's name in payout histories and the top-up channel's.
const Name = "alipay"

// Open platform methods and the transfer product the rail uses.
const (
	MethodTransfer  = "alipay.fund.trans.uni.transfer"
	MethodQuery     = "alipay.fund.trans.common.query"
	MethodPagePay   = "alipay.trade.page.pay"
	ProductTransfer = "TRANS_ACCOUNT_NO_PWD"
	SceneDirect     = "DIRECT_TRANSFER"
	ProductPagePay  = "FAST_INSTANT_TRADE_PAY"
	Currency        = "CNY" // Alipay's domestic transfers and payments are in yuan
	codeBusiness    = "40004"
	orderNotExist   = "ORDER_NOT_EXIST"
	// infoInconsistent: the same out_biz_no sent again with another payee
	// or amount; the first transfer may have been made, so it is never a
	// failure of the payout.
	infoInconsistent = "PAYMENT_INFO_INCONSISTENCY"
)

// Payee identity types.
const (
	IdentityUserID  = "ALIPAY_USER_ID"  // 2088 + 12 digits
	IdentityLogonID = "ALIPAY_LOGON_ID" // phone number or e-mail: needs the holder's name
)

var userIDRE = regexp.MustCompile(`^2088[0-9]{12}$`)

// Rail is the Alipay payout rail.
type Rail struct {
	C   *Client
	Log *slog.Logger
}

var _ app.Rail = (*Rail)(nil)

// Name implements app.Rail.
func (r *Rail) Name() string { return Name }

// PayeeInfo is payee_info of a transfer.
type PayeeInfo struct {
	Identity     string `json:"identity"`
	IdentityType string `json:"identity_type"`
	Name         string `json:"name,omitempty"`
}

// TransferBiz is biz_content of alipay.fund.trans.uni.transfer.
type TransferBiz struct {
	OutBizNo       string    `json:"out_biz_no"`
	TransAmount    string    `json:"trans_amount"`
	ProductCode    string    `json:"product_code"`
	BizScene       string    `json:"biz_scene"`
	OrderTitle     string    `json:"order_title"`
	PayeeInfo      PayeeInfo `json:"payee_info"`
	Remark         string    `json:"remark,omitempty"`
	BusinessParams string    `json:"business_params,omitempty"`
}

// TransferResult is the answer of alipay.fund.trans.uni.transfer.
type TransferResult struct {
	Common
	OutBizNo       string `json:"out_biz_no"`
	OrderID        string `json:"order_id"`
	PayFundOrderID string `json:"pay_fund_order_id"`
	Status         string `json:"status"`
	TransDate      string `json:"trans_date"`
}

// QueryBiz is biz_content of alipay.fund.trans.common.query.
type QueryBiz struct {
	ProductCode string `json:"product_code"`
	BizScene    string `json:"biz_scene"`
	OutBizNo    string `json:"out_biz_no"`
}

// QueryResult is the answer of alipay.fund.trans.common.query.
type QueryResult struct {
	Common
	OrderID        string `json:"order_id"`
	PayFundOrderID string `json:"pay_fund_order_id"`
	OutBizNo       string `json:"out_biz_no"`
	TransAmount    string `json:"trans_amount"`
	Status         string `json:"status"`
	PayDate        string `json:"pay_date"`
	ErrorCode      string `json:"error_code"`
	FailReason     string `json:"fail_reason"`
}

// Payee builds payee_info from a payout method: a 2088… user id is paid by
// id; a phone number or e-mail by logon id, with the holder's name (Alipay
// checks it against the account).
func Payee(m domain.Method) (PayeeInfo, error) {
	id := strings.TrimSpace(m.AlipayID)
	if userIDRE.MatchString(id) {
		return PayeeInfo{Identity: id, IdentityType: IdentityUserID, Name: strings.TrimSpace(m.AccountName)}, nil
	}
	if strings.TrimSpace(m.AccountName) == "" {
		return PayeeInfo{}, fmt.Errorf("an Alipay logon id (phone or e-mail) is paid only with the holder's name: account_name is empty")
	}
	return PayeeInfo{Identity: id, IdentityType: IdentityLogonID, Name: strings.TrimSpace(m.AccountName)}, nil
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
	if t.Currency != Currency {
		st.State, st.FailureCode, st.Message = app.RailFailed, domain.FailUnsupported, "Alipay transfers pay CNY only, not "+t.Currency
		return st, nil
	}
	payee, err := Payee(t.Method)
	if err != nil {
		st.State, st.FailureCode, st.Message = app.RailFailed, domain.FailInvalidAccount, err.Error()
		return st, nil
	}
	biz := TransferBiz{OutBizNo: t.Reference, TransAmount: t.Amount.StringFixed(2), ProductCode: ProductTransfer, BizScene: SceneDirect,
		OrderTitle: "gpubill payout", PayeeInfo: payee, Remark: "gpubill payout " + t.Reference}
	if r.C.Cfg.PayerShowName != "" {
		b, _ := json.Marshal(map[string]string{"payer_show_name": r.C.Cfg.PayerShowName}) // a map of strings always marshals
		biz.BusinessParams = string(b)
	}
	obj, com, err := r.C.call(ctx, MethodTransfer, biz)
	if err != nil {
		return st, fmt.Errorf("alipay submit %s: %w", t.Reference, err)
	}
	switch {
	case com.Code == codeSuccess:
		var res TransferResult
		if err := json.Unmarshal(obj, &res); err != nil {
			return st, fmt.Errorf("alipay submit %s: answer: %v: %w", t.Reference, err, app.ErrRailUnavailable)
		}
		if res.OutBizNo != t.Reference {
			return st, fmt.Errorf("alipay submit %s: answer names out_biz_no %q", t.Reference, res.OutBizNo)
		}
		return r.status(st, res.Status, "", "")
	case com.Code == codeBusiness && domain.AlipayUnknown(com.SubCode):
		return st, fmt.Errorf("alipay submit %s: %s: %w", t.Reference, com, app.ErrRailUnavailable)
	case com.Code == codeBusiness && com.SubCode != infoInconsistent:
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
	obj, com, err := r.C.call(ctx, MethodQuery, QueryBiz{ProductCode: ProductTransfer, BizScene: SceneDirect, OutBizNo: ref})
	if err != nil {
		return st, fmt.Errorf("alipay query %s: %w", ref, err)
	}
	switch {
	case com.Code == codeBusiness && com.SubCode == orderNotExist:
		return st, fmt.Errorf("alipay query %s: %w", ref, app.ErrUnknownReference)
	case com.Code == codeBusiness && domain.AlipayUnknown(com.SubCode):
		return st, fmt.Errorf("alipay query %s: %s: %w", ref, com, app.ErrRailUnavailable)
	case com.Code != codeSuccess:
		return st, fmt.Errorf("alipay query %s: refused: %s", ref, com)
	}
	var res QueryResult
	if err := json.Unmarshal(obj, &res); err != nil {
		return st, fmt.Errorf("alipay query %s: answer: %v: %w", ref, err, app.ErrRailUnavailable)
	}
	if res.OutBizNo != ref {
		return st, fmt.Errorf("alipay query %s: answer names out_biz_no %q", ref, res.OutBizNo)
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
