package alipay

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/ids"
)

// Open platform methods and the transfer product the rail uses.
const (
	MethodTransfer  = "alipay.fund.trans.uni.transfer"
	MethodQuery     = "alipay.fund.trans.common.query"
	MethodPagePay   = "alipay.trade.page.pay"
	ProductTransfer = "TRANS_ACCOUNT_NO_PWD"
	SceneDirect     = "DIRECT_TRANSFER"
	ProductPagePay  = "FAST_INSTANT_TRADE_PAY"
	Currency        = "CNY" // Alipay's domestic transfers and payments are in yuan
	// SubOrderNotExist: the query found no order for the out_biz_no.
	SubOrderNotExist = "ORDER_NOT_EXIST"
	// SubInfoInconsistent: the same out_biz_no sent again with another
	// payee or amount; the first transfer may have been made, so it is
	// never a failure of the payout.
	SubInfoInconsistent = "PAYMENT_INFO_INCONSISTENCY"
)

// Payee identity types.
const (
	IdentityUserID  = "ALIPAY_USER_ID"  // 2088 + 12 digits
	IdentityLogonID = "ALIPAY_LOGON_ID" // phone number or e-mail: needs the holder's name
)

var userIDRE = regexp.MustCompile(`^2088[0-9]{12}$`)

// IsUserID reports whether an Alipay id is a user id (2088 + 12 digits),
// paid as ALIPAY_USER_ID; any other (phone, e-mail) is a logon id.
func IsUserID(id string) bool { return userIDRE.MatchString(id) }

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

// Answers to a notification: Alipay stops sending on "success" and sends
// again (for about 25 hours: 4 m, 10 m, 10 m, 1 h, 2 h, 6 h, 15 h) on
// anything else.
const (
	AnswerSuccess = "success"
	AnswerFail    = "fail"
)

// Trade statuses of a payment notification.
const (
	TradeSuccess   = "TRADE_SUCCESS"  // paid, refundable
	TradeFinished  = "TRADE_FINISHED" // paid, no longer refundable (notified again when the refund period ends)
	TradeWaitBuyer = "WAIT_BUYER_PAY"
	TradeClosed    = "TRADE_CLOSED"
)

// notifyFields are required in every payment notification.
var notifyFields = []string{"notify_id", "notify_time", "app_id", "out_trade_no", "trade_no", "trade_status", "total_amount", "passback_params"}

// PagePayBiz is biz_content of alipay.trade.page.pay.
type PagePayBiz struct {
	OutTradeNo     string `json:"out_trade_no"`
	TotalAmount    string `json:"total_amount"`
	Subject        string `json:"subject"`
	ProductCode    string `json:"product_code"`
	TimeoutExpress string `json:"timeout_express,omitempty"`
	// PassbackParams comes back in the payment notification as it was
	// sent (URL-encoded): the renter id the top-up is for. Only a request
	// signed with the app's key makes an order, so it is as trustworthy as
	// the notification's signature.
	PassbackParams string `json:"passback_params"`
}

// PagePayURL is a renter's top-up order on Alipay's computer-website
// payment page: the signed alipay.trade.page.pay request as a URL on the
// gateway, for the renter's browser; its payment notification posts the
// deposit to the renter's wallet. outTradeNo is the merchant's order
// number ("" : a new one).
func (c *Client) PagePayURL(renterID string, amount decimal.Decimal, outTradeNo string) (string, string, error) {
	if err := ids.CheckPartyID(renterID); err != nil {
		return "", "", fmt.Errorf("alipay top-up: renter %q: %w", renterID, err)
	}
	// By value, not by exponent: 10.000 is 10.00 yuan.
	if !amount.IsPositive() || !amount.Equal(amount.Round(2)) {
		return "", "", fmt.Errorf("alipay top-up: amount %s: want a positive amount in yuan, at most 2 decimals", amount)
	}
	if c.Cfg.NotifyURL == "" {
		return "", "", errors.New("alipay top-up: GPUBILL_ALIPAY_NOTIFY_URL is not set: Alipay could not tell gpubill of the payment")
	}
	if outTradeNo == "" {
		outTradeNo = "tu" + strings.ReplaceAll(ids.New(""), "-", "")
	}
	v, err := c.RequestParams(MethodPagePay, PagePayBiz{OutTradeNo: outTradeNo, TotalAmount: amount.StringFixed(2), Subject: topUpSubject,
		ProductCode: ProductPagePay, TimeoutExpress: pagePayTimeoutExpress, PassbackParams: url.QueryEscape(renterID)},
		map[string]string{"notify_url": c.Cfg.NotifyURL})
	if err != nil {
		return "", "", err
	}
	return c.Cfg.gateway() + "?" + v.Encode(), outTradeNo, nil
}

// ErrInvalidNotification is a notification that verifies but is not one
// for this app (a field missing, another app or seller).
var ErrInvalidNotification = errors.New("alipay: invalid notification")

// Page-pay order settings.
const (
	topUpSubject = "gpubill wallet top-up"
	// PagePayTimeout: an unpaid top-up order closes on the platform after
	// this (timeout_express, pagePayTimeoutExpress).
	PagePayTimeout        = 2 * time.Hour
	pagePayTimeoutExpress = "2h"
)

// PagePayAmountMax is the largest total_amount Alipay takes for an order
// (its range is 0.01 to 100 000 000 yuan).
var PagePayAmountMax = decimal.NewFromInt(100_000_000)

// VerifyNotification checks a payment notification came from the platform
// for this app: sign_type RSA2, signed (over every field but sign and
// sign_type) by the platform's key, the required fields present, app_id
// ours, seller_id ours when configured. ErrBadSignature when forged.
func (c *Client) VerifyNotification(form url.Values) error {
	if form.Get("sign_type") != SignType {
		return fmt.Errorf("sign_type %q, want %s: %w", form.Get("sign_type"), SignType, ErrBadSignature)
	}
	if err := Verify(c.Cfg.PlatformKey, []byte(SignContent(form, "sign", "sign_type")), form.Get("sign")); err != nil {
		return err
	}
	for _, f := range notifyFields {
		if form.Get(f) == "" {
			return fmt.Errorf("%s missing: %w", f, ErrInvalidNotification)
		}
	}
	if form.Get("app_id") != c.Cfg.AppID {
		return fmt.Errorf("app_id %q is not this app: %w", form.Get("app_id"), ErrInvalidNotification)
	}
	if c.Cfg.SellerID != "" && form.Get("seller_id") != c.Cfg.SellerID {
		return fmt.Errorf("seller_id %q is not this merchant: %w", form.Get("seller_id"), ErrInvalidNotification)
	}
	return nil
}
