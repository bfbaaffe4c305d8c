package wechatpay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/ids"
)

// API v3 paths the rail uses.
const (
	PathTransferBills = "/v3/fund-app/mch-transfer/transfer-bills"
	PathTransferByOut = "/v3/fund-app/mch-transfer/transfer-bills/out-bill-no/"
	PathNative        = "/v3/pay/transactions/native"
	Currency          = "CNY" // WeChat Pay's domestic transfers and payments are in yuan, amounts in fen
)

// TransferSceneID is the transfer scene the payouts use: 1005, labour
// remuneration (佣金报酬), with its two report items.
const (
	TransferSceneID = "1005"
	reportJob       = "岗位类型"
	reportPay       = "报酬说明"
)

// Transfer bill states.
const (
	StateAccepted    = "ACCEPTED"
	StateProcessing  = "PROCESSING"
	StateWaitConfirm = "WAIT_USER_CONFIRM"
	StateTransfering = "TRANSFERING"
	StateSuccess     = "SUCCESS"
	StateFail        = "FAIL"
	StateCanceling   = "CANCELING"
	StateCancelled   = "CANCELLED"
)

// UserNameMinFen: from 2 000 yuan a transfer must carry the payee's
// (encrypted) real name.
const UserNameMinFen = 200000

// SceneReportInfo is one item of transfer_scene_report_infos.
type SceneReportInfo struct {
	InfoType    string `json:"info_type"`
	InfoContent string `json:"info_content"`
}

// TransferRequest is the body of POST transfer-bills.
type TransferRequest struct {
	AppID              string            `json:"appid"`
	OutBillNo          string            `json:"out_bill_no"`
	TransferSceneID    string            `json:"transfer_scene_id"`
	OpenID             string            `json:"openid"`
	UserName           string            `json:"user_name,omitempty"` // EncryptSensitive
	TransferAmount     int64             `json:"transfer_amount"`     // fen
	TransferRemark     string            `json:"transfer_remark"`
	NotifyURL          string            `json:"notify_url,omitempty"`
	UserRecvPerception string            `json:"user_recv_perception,omitempty"`
	ReportInfos        []SceneReportInfo `json:"transfer_scene_report_infos"`
}

// TransferResult is the answer of POST transfer-bills.
type TransferResult struct {
	OutBillNo      string `json:"out_bill_no"`
	TransferBillNo string `json:"transfer_bill_no"`
	CreateTime     string `json:"create_time"`
	State          string `json:"state"`
	FailReason     string `json:"fail_reason,omitempty"`
	PackageInfo    string `json:"package_info,omitempty"`
}

// TransferBill is a transfer as queried by out_bill_no (and as its
// MCHTRANSFER.BILL.FINISHED notification's resource).
type TransferBill struct {
	MchID          string `json:"mch_id"`
	OutBillNo      string `json:"out_bill_no"`
	TransferBillNo string `json:"transfer_bill_no"`
	AppID          string `json:"appid"`
	State          string `json:"state"`
	TransferAmount int64  `json:"transfer_amount"`
	TransferRemark string `json:"transfer_remark"`
	FailReason     string `json:"fail_reason,omitempty"`
	OpenID         string `json:"openid"`
	CreateTime     string `json:"create_time"`
	UpdateTime     string `json:"update_time"`
}

// Fen is a yuan amount in fen; an amount with more than two decimals or
// not positive is an error.
func Fen(amount decimal.Decimal) (int64, error) {
	f := amount.Shift(2)
	if !amount.IsPositive() || !f.IsInteger() || f.GreaterThan(decimal.NewFromInt(1<<53)) {
		return 0, fmt.Errorf("amount %s: want a positive amount in yuan with at most 2 decimals", amount)
	}
	return f.IntPart(), nil
}

// Yuan is a fen amount in yuan.
func Yuan(fen int64) decimal.Decimal { return decimal.New(fen, -2) }

var outNoRE = regexp.MustCompile(`^[A-Za-z0-9]{1,32}$`)

// OutBillNo is the merchant's number of a rail reference. out_bill_no is at
// most 32 letters and digits, and gpubill's references are po_{UUIDv7}
// with -{attempt} from the second attempt: "P", the UUID in 22 base-62
// digits and "N{attempt}" after the first — one number per reference and
// back (Reference). A reference already of letters and digits (not
// starting with P) is its own number.
func OutBillNo(reference string) (string, error) {
	if rest, ok := strings.CutPrefix(reference, "po_"); ok {
		id, attempt := rest, ""
		if len(rest) > 36 && rest[36] == '-' {
			id, attempt = rest[:36], rest[37:]
		}
		if len(id) == 36 {
			if u, err := uuid.Parse(id); err == nil {
				n := new(big.Int).SetBytes(u[:]).Text(62)
				out := "P" + strings.Repeat("0", 22-len(n)) + n
				if attempt != "" {
					a, err := strconv.Atoi(attempt)
					if err != nil || a < 2 || strconv.Itoa(a) != attempt {
						return "", fmt.Errorf("reference %q: attempt %q", reference, attempt)
					}
					out += "N" + attempt
				}
				if len(out) <= 32 {
					return out, nil
				}
			}
		}
	}
	if outNoRE.MatchString(reference) && !strings.HasPrefix(reference, "P") {
		return reference, nil
	}
	return "", fmt.Errorf("reference %q has no out_bill_no", reference)
}

// Reference is the rail reference of an out_bill_no OutBillNo made.
func Reference(outBillNo string) (string, error) {
	if !outNoRE.MatchString(outBillNo) {
		return "", fmt.Errorf("out_bill_no %q", outBillNo)
	}
	if !strings.HasPrefix(outBillNo, "P") {
		return outBillNo, nil
	}
	if len(outBillNo) < 23 {
		return "", fmt.Errorf("out_bill_no %q is not one of gpubill's", outBillNo)
	}
	n, ok := new(big.Int).SetString(outBillNo[1:23], 62)
	if !ok || n.BitLen() > 128 {
		return "", fmt.Errorf("out_bill_no %q is not one of gpubill's", outBillNo)
	}
	var u uuid.UUID
	n.FillBytes(u[:])
	ref := "po_" + u.String()
	if rest := outBillNo[23:]; rest != "" {
		a, ok := strings.CutPrefix(rest, "N")
		if n, err := strconv.Atoi(a); !ok || err != nil || n < 2 || strconv.Itoa(n) != a {
			return "", fmt.Errorf("out_bill_no %q is not one of gpubill's", outBillNo)
		}
		ref += "-" + a
	}
	if back, err := OutBillNo(ref); err != nil || back != outBillNo {
		return "", fmt.Errorf("out_bill_no %q is not one of gpubill's", outBillNo)
	}
	return ref, nil
}

// Transfer creates a transfer bill (POST transfer-bills). The same
// out_bill_no answers the same bill; resubmit only under the same number,
// and only after QueryTransfer found none.
func (c *Client) Transfer(ctx context.Context, r TransferRequest) (TransferResult, error) {
	var res TransferResult
	err := c.Do(ctx, http.MethodPost, PathTransferBills, r, &res)
	return res, err
}

// QueryTransfer reads a transfer bill by out_bill_no; NOT_FOUND (an
// *APIError) when the platform has none.
func (c *Client) QueryTransfer(ctx context.Context, outBillNo string) (TransferBill, error) {
	var res TransferBill
	err := c.Do(ctx, http.MethodGet, PathTransferByOut+url.PathEscape(outBillNo), nil, &res)
	return res, err
}

// NativeRequest is the body of POST /v3/pay/transactions/native.
type NativeRequest struct {
	AppID       string `json:"appid"`
	MchID       string `json:"mchid"`
	Description string `json:"description"`
	OutTradeNo  string `json:"out_trade_no"`
	TimeExpire  string `json:"time_expire,omitempty"` // RFC 3339
	// Attach comes back in the payment notification as it was sent: the
	// renter id the top-up is for. Only a request signed with the
	// merchant's key makes an order, so it is as trustworthy as the
	// notification's signature.
	Attach    string      `json:"attach"`
	NotifyURL string      `json:"notify_url"`
	Amount    OrderAmount `json:"amount"`
}

// OrderAmount is an order's amount in fen.
type OrderAmount struct {
	Total    int64  `json:"total"`
	Currency string `json:"currency"`
}

// NativeResult is the Native order's answer: the QR code's content.
type NativeResult struct {
	CodeURL string `json:"code_url"`
}

// Top-up order settings.
const (
	topUpDescription = "gpubill wallet top-up"
	// OrderTimeout: an unpaid top-up order closes after this (time_expire).
	OrderTimeout = 2 * time.Hour
)

// NativeOrder makes a renter's top-up order for scanning (Native): the
// code_url the renter's WeChat pays; its TRANSACTION.SUCCESS notification
// deposits the amount. The same out_trade_no with the same content
// answers the same code.
func (c *Client) NativeOrder(ctx context.Context, renterID string, amount decimal.Decimal, outTradeNo string, expires time.Time) (string, error) {
	if err := ids.CheckPartyID(renterID); err != nil {
		return "", fmt.Errorf("wechatpay top-up: renter %q: %w", renterID, err)
	}
	fen, err := Fen(amount)
	if err != nil {
		return "", fmt.Errorf("wechatpay top-up: %w", err)
	}
	if c.Cfg.NotifyURL == "" {
		return "", fmt.Errorf("wechatpay top-up: %s is not set: WeChat Pay could not tell gpubill of the payment", EnvNotifyURL)
	}
	if len(outTradeNo) < 6 || !outNoRE.MatchString(outTradeNo) {
		return "", fmt.Errorf("wechatpay top-up: out_trade_no %q: want 6 to 32 letters and digits", outTradeNo)
	}
	var res NativeResult
	if err := c.Do(ctx, http.MethodPost, PathNative, NativeRequest{AppID: c.Cfg.AppID, MchID: c.Cfg.MchID, Description: topUpDescription,
		OutTradeNo: outTradeNo, TimeExpire: expires.In(Beijing).Format(time.RFC3339), Attach: renterID, NotifyURL: c.Cfg.NotifyURL,
		Amount: OrderAmount{Total: fen, Currency: Currency}}, &res); err != nil {
		return "", err
	}
	if !strings.HasPrefix(res.CodeURL, "weixin://") {
		return "", fmt.Errorf("wechatpay top-up %s: code_url %q: %w", outTradeNo, res.CodeURL, ErrUnavailable)
	}
	return res.CodeURL, nil
}

// Beijing is the time zone of the platform's times.
var Beijing = time.FixedZone("CST", 8*3600)

// Notification is the envelope WeChat Pay posts to notify_url.
type Notification struct {
	ID           string   `json:"id"`
	CreateTime   string   `json:"create_time"`
	EventType    string   `json:"event_type"`
	ResourceType string   `json:"resource_type"`
	Summary      string   `json:"summary"`
	Resource     Resource `json:"resource"`
}

// Resource is a notification's encrypted payload.
type Resource struct {
	OriginalType   string `json:"original_type"`
	Algorithm      string `json:"algorithm"`
	Ciphertext     string `json:"ciphertext"`
	AssociatedData string `json:"associated_data"`
	Nonce          string `json:"nonce"`
}

// Event types.
const (
	EventTransactionSuccess = "TRANSACTION.SUCCESS"
	EventTransferFinished   = "MCHTRANSFER.BILL.FINISHED"
	// A refund's end (made in the merchant platform: gpubill asks for no
	// refunds): REFUND.SUCCESS when the money went back to the payer,
	// REFUND.ABNORMAL when it could not (the payer's account closed; the
	// merchant has it sent elsewhere), REFUND.CLOSED when it was closed.
	EventRefundSuccess  = "REFUND.SUCCESS"
	EventRefundAbnormal = "REFUND.ABNORMAL"
	EventRefundClosed   = "REFUND.CLOSED"
	ResourceEncrypted   = "encrypt-resource"
)

// Transaction is a payment (the TRANSACTION.SUCCESS resource).
type Transaction struct {
	MchID         string `json:"mchid"`
	AppID         string `json:"appid"`
	OutTradeNo    string `json:"out_trade_no"`
	TransactionID string `json:"transaction_id"`
	TradeType     string `json:"trade_type"`
	TradeState    string `json:"trade_state"`
	Attach        string `json:"attach"`
	SuccessTime   string `json:"success_time"`
	Payer         struct {
		OpenID string `json:"openid"`
	} `json:"payer"`
	Amount struct {
		Total         int64  `json:"total"`
		PayerTotal    int64  `json:"payer_total"`
		Currency      string `json:"currency"`
		PayerCurrency string `json:"payer_currency"`
	} `json:"amount"`
}

// TradeSuccess is a paid transaction's trade_state.
const TradeSuccess = "SUCCESS"

// Refund is one refund of a payment (the REFUND.* resource). WeChat Pay
// notifies each refund on its own, under its own out_refund_no and
// refund_id, with that refund's amount (amount.refund), not the payment's
// refunded total; amount.total is the payment's.
type Refund struct {
	MchID         string `json:"mchid"`
	OutTradeNo    string `json:"out_trade_no"`
	TransactionID string `json:"transaction_id"`
	OutRefundNo   string `json:"out_refund_no"`
	RefundID      string `json:"refund_id"`
	RefundStatus  string `json:"refund_status"`
	SuccessTime   string `json:"success_time,omitempty"`
	Amount        struct {
		Total       int64 `json:"total"`
		Refund      int64 `json:"refund"`
		PayerTotal  int64 `json:"payer_total"`
		PayerRefund int64 `json:"payer_refund"`
	} `json:"amount"`
}

// A refund's refund_status, as its event type says it.
const (
	RefundSuccess  = "SUCCESS"
	RefundAbnormal = "ABNORMAL"
	RefundClosed   = "CLOSED"
)

// ErrInvalidNotification is a notification that verifies but cannot be
// read or is not for this merchant.
var ErrInvalidNotification = errors.New("wechatpay: invalid notification")

// OpenNotification verifies a notification's signature headers
// (VerifySigned: ErrBadSignature, ErrStale), reads its envelope and opens
// its resource with the APIv3 key (a resource that does not open is
// ErrBadSignature: only the platform has the key).
func (c *Client) OpenNotification(h http.Header, body []byte) (Notification, []byte, error) {
	var n Notification
	if err := c.VerifySigned(h, body); err != nil {
		return n, nil, err
	}
	if err := json.Unmarshal(body, &n); err != nil {
		return n, nil, fmt.Errorf("%w: %v", ErrInvalidNotification, err)
	}
	if n.ID == "" || n.EventType == "" || n.ResourceType != ResourceEncrypted || n.Resource.Algorithm != Algorithm {
		return n, nil, fmt.Errorf("%w: id %q event_type %q resource_type %q algorithm %q", ErrInvalidNotification,
			n.ID, n.EventType, n.ResourceType, n.Resource.Algorithm)
	}
	pt, err := Decrypt(c.Cfg.APIv3Key, n.Resource.AssociatedData, n.Resource.Nonce, n.Resource.Ciphertext)
	if err != nil {
		if errors.Is(err, ErrBadSignature) {
			return n, nil, err
		}
		return n, nil, fmt.Errorf("%w: %v", ErrInvalidNotification, err)
	}
	return n, pt, nil
}
