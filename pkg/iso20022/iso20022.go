// Package iso20022 builds and reads the ISO 20022 bank files gpubill
// exchanges with a bank: pain.001 customer credit transfer initiations
// (payout batches, out), pain.002 payment status reports and camt.054
// debit/credit notifications (in). It is pure: bytes in, typed values out,
// no I/O. Reading is strict where money depends on it: a missing required
// element, a bad amount or currency is a *MalformedError naming the
// element's path ("Ntfctn[0]/Ntry[2]/Amt"), never a zero value.
package iso20022

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// Kind is an ISO 20022 message definition ("pain.002.001.10").
type Kind string

// Message families this package reads (any version of these whose layout
// it knows; see Detect).
const (
	FamilyPain001 = "pain.001"
	FamilyPain002 = "pain.002"
	FamilyCamt054 = "camt.054"
)

// Family is the message without its variant and version ("pain.002").
func (k Kind) Family() string {
	p := strings.Split(string(k), ".")
	if len(p) < 2 {
		return string(k)
	}
	return p[0] + "." + p[1]
}

// nsPrefix starts every ISO 20022 XML namespace.
const nsPrefix = "urn:iso:std:iso:20022:tech:xsd:"

// Namespaces of the versions written.
const (
	NamespacePain001 = nsPrefix + "pain.001.001.09"
)

// supported lists the versions read: their elements used here have the
// same names and nesting (camt.054 v02 has Sts as a plain code, v08 as a
// choice; both are read).
var supported = map[Kind]bool{
	"pain.001.001.03": true, "pain.001.001.09": true,
	"pain.002.001.03": true, "pain.002.001.10": true,
	"camt.054.001.02": true, "camt.054.001.08": true,
}

// fileBytesMax bounds what Detect and the parsers read: a day's batch of
// tens of thousands of payees is a few MiB.
const fileBytesMax = 64 << 20

// MalformedError is a file that is not a well-formed message this package
// reads; Element is the path of the offending element.
type MalformedError struct {
	Element string
	Reason  string
}

func (e *MalformedError) Error() string {
	if e.Element == "" {
		return "malformed ISO 20022 file: " + e.Reason
	}
	return fmt.Sprintf("malformed ISO 20022 file: %s: %s", e.Element, e.Reason)
}

func malformed(path, format string, args ...any) error {
	return &MalformedError{Element: path, Reason: fmt.Sprintf(format, args...)}
}

// ErrUnsupported is a well-formed XML document of a message or version
// this package does not read.
var ErrUnsupported = errors.New("unsupported ISO 20022 message")

// Detect reads the root element: it must be Document in an ISO 20022
// namespace of a supported version.
func Detect(b []byte) (Kind, error) {
	if len(b) > fileBytesMax {
		return "", malformed("", "file of %d bytes is over the %d-byte limit", len(b), fileBytesMax)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return "", malformed("", "no root element")
		}
		if err != nil {
			return "", malformed("", "not XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if se.Name.Local != "Document" {
			return "", malformed(se.Name.Local, "the root element must be Document")
		}
		k, ok := strings.CutPrefix(se.Name.Space, nsPrefix)
		if !ok {
			return "", malformed("Document", "namespace %q is not ISO 20022", se.Name.Space)
		}
		if !supported[Kind(k)] {
			return Kind(k), fmt.Errorf("%w: %s", ErrUnsupported, k)
		}
		return Kind(k), nil
	}
}

// unmarshal decodes a whole document, refusing anything but one root.
func unmarshal(b []byte, v any) error {
	if err := xml.Unmarshal(b, v); err != nil {
		var se *xml.SyntaxError
		if errors.As(err, &se) {
			return malformed("", "line %d: %s", se.Line, se.Msg)
		}
		return malformed("", "%v", err)
	}
	return nil
}

var (
	ccyRE    = regexp.MustCompile(`^[A-Z]{3}$`)
	amountRE = regexp.MustCompile(`^[0-9]{1,18}(\.[0-9]{1,17})?$`)
	// max35RE is an identifier (Max35Text) as banks take it: 1 to 35
	// characters on one line, no leading or trailing blank.
	max35RE = regexp.MustCompile(`^\S(?:[^\r\n]{0,33}\S)?$`)
)

// Amount is an ISO amount with its currency attribute.
type Amount struct {
	Ccy   string `xml:"Ccy,attr"`
	Value string `xml:",chardata"`
}

// parse checks the currency and the decimal (no sign, no exponent, at most
// 18 digits) and returns the value.
func (a *Amount) parse(path string) (decimal.Decimal, string, error) {
	if a == nil {
		return decimal.Zero, "", malformed(path, "required")
	}
	if !ccyRE.MatchString(a.Ccy) {
		return decimal.Zero, "", malformed(path+"/@Ccy", "want a 3-letter currency code, got %q", a.Ccy)
	}
	v := strings.TrimSpace(a.Value)
	if !amountRE.MatchString(v) || len(strings.ReplaceAll(v, ".", "")) > 18 {
		return decimal.Zero, "", malformed(path, "want a decimal amount, got %q", clip(v))
	}
	d, err := decimal.NewFromString(v)
	if err != nil {
		return decimal.Zero, "", malformed(path, "want a decimal amount, got %q", clip(v))
	}
	return d, a.Ccy, nil
}

// required checks a text element is present and not blank.
func required(path, v string) error {
	if strings.TrimSpace(v) == "" {
		return malformed(path, "required")
	}
	return nil
}

// DateChoice is Dt or DtTm (DateAndDateTime2Choice).
type DateChoice struct {
	Dt   string `xml:"Dt,omitempty"`
	DtTm string `xml:"DtTm,omitempty"`
}

func (d *DateChoice) parse(path string) (time.Time, error) {
	if d == nil {
		return time.Time{}, nil
	}
	if d.Dt != "" {
		return parseDate(path+"/Dt", d.Dt)
	}
	if d.DtTm != "" {
		return parseDateTime(path+"/DtTm", d.DtTm)
	}
	return time.Time{}, malformed(path, "want Dt or DtTm")
}

func parseDate(path, s string) (time.Time, error) {
	t, err := time.Parse(time.DateOnly, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, malformed(path, "want an ISO date (YYYY-MM-DD), got %q", clip(s))
	}
	return t, nil
}

// parseDateTime is ParseDateTime, malformed naming path.
func parseDateTime(path, s string) (time.Time, error) {
	t, ok := ParseDateTime(s)
	if !ok {
		return time.Time{}, malformed(path, "want an ISO date-time, got %q", clip(strings.TrimSpace(s)))
	}
	return t, nil
}

// ParseDateTime reads an ISODateTime (surrounding space aside): with its
// offset (Z, +08:00), or without one, which ISO 20022 allows (the
// sender's local time, its zone unsaid) and which is read as UTC.
func ParseDateTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

func clip(s string) string { return apperr.Clip(s, 67) }

// Reason is a status or return reason: an ISO external code (Cd, e.g.
// AC04) or a bank's proprietary one (Prtry), with any additional text.
// Rsn is optional where this package reads it: without it Code is "", the
// additional text all the bank said (domain.BankFailure: "no reason given").
type Reason struct {
	Code           string
	Proprietary    bool
	AdditionalInfo string
}

// xmlReasonChoice is Rsn (Cd | Prtry).
type xmlReasonChoice struct {
	Cd    string `xml:"Cd"`
	Prtry string `xml:"Prtry"`
}

func (r *xmlReasonChoice) reason(path string, addtl []string) (Reason, error) {
	if r == nil {
		return Reason{AdditionalInfo: strings.Join(addtl, " ")}, nil
	}
	out := Reason{Code: strings.TrimSpace(r.Cd), AdditionalInfo: strings.Join(addtl, " ")}
	if out.Code == "" {
		out.Code, out.Proprietary = strings.TrimSpace(r.Prtry), true
	}
	if out.Code == "" {
		return out, malformed(path, "want Cd or Prtry")
	}
	return out, nil
}
