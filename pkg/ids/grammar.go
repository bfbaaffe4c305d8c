package ids

// The one grammar for the identifiers that cross services: party (provider,
// renter) ids, tax jurisdictions, settlement cycle ids and the ledger account
// addresses built from them (DESIGN §4). Metering refuses a party that breaks
// it at creation, so an id accepted at the door always makes a valid ledger
// address and a valid NATS subject token (usage.recorded.{provider},
// party.updated.{id}, billing.wallet.depleted.{renter} …); the ledger, tax,
// settlement and payout check and build addresses with the same functions.

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// Length limits of the grammar.
const (
	PartyIDLenMax      = 64
	JurisdictionLenMax = 16
)

// A party id: ASCII letters, digits, '_' and '-', starting with a letter or
// digit, at most PartyIDLenMax bytes. No ':' (the address separator), no '.',
// '*', '>' or space (NATS subject tokens), no '@', '/' or non-ASCII (paths,
// logs, bank files). A jurisdiction: an ISO 3166 code or a code with a
// subdivision (CN, CN-BJ, US_CA), same alphabet, at most JurisdictionLenMax.
// Checked with a byte loop, not a regexp: ingest checks two ids per event.
func wellFormed(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '-') {
			return false
		}
	}
	return s != ""
}

// ErrGrammar is wrapped by every refusal of this grammar.
var ErrGrammar = errors.New("breaks the id grammar")

// GrammarError is one refusal: what was refused and why. Its message reads
// without the field name, so callers can put it behind one
// (apperr.Invalid("provider_id", "%s", err)).
type GrammarError struct {
	Value  string
	Reason string
}

func (e *GrammarError) Error() string { return fmt.Sprintf("%q %s", clip(e.Value), e.Reason) }

// Unwrap makes errors.Is(err, ErrGrammar) true.
func (e *GrammarError) Unwrap() error { return ErrGrammar }

func clip(s string) string { return apperr.Clip(s, 73) }

// CheckPartyID checks a provider or renter id.
func CheckPartyID(id string) error {
	switch {
	case id == "":
		return &GrammarError{id, "is empty: an id is required"}
	case len(id) > PartyIDLenMax:
		return &GrammarError{id, fmt.Sprintf("is longer than %d characters", PartyIDLenMax)}
	case !wellFormed(id):
		return &GrammarError{id, "may contain only ASCII letters, digits, '_' and '-', and must start with a letter or digit " +
			"(it is part of ledger addresses and event subjects)"}
	}
	return nil
}

// CheckJurisdiction checks a tax jurisdiction (CN, CN-BJ, US_CA).
func CheckJurisdiction(j string) error {
	switch {
	case j == "":
		return &GrammarError{j, "is empty: a jurisdiction is required (e.g. CN, US, CN-BJ)"}
	case len(j) > JurisdictionLenMax:
		return &GrammarError{j, fmt.Sprintf("is longer than %d characters", JurisdictionLenMax)}
	case !wellFormed(j):
		return &GrammarError{j, "may contain only ASCII letters, digits, '_' and '-' (e.g. CN, US, CN-BJ; " +
			"it is part of the ledger address tax:withheld:{jurisdiction})"}
	}
	return nil
}

// CheckCycleID checks a settlement cycle id, cyc-YYYYMMDD of a real date.
func CheckCycleID(id string) error {
	if len(id) != len("cyc-20060102") || !strings.HasPrefix(id, "cyc-") {
		return &GrammarError{id, "is not a cycle id: want cyc-YYYYMMDD"}
	}
	if _, err := time.Parse("20060102", id[4:]); err != nil {
		return &GrammarError{id, "is not a cycle id: want cyc-YYYYMMDD"}
	}
	return nil
}

// IsSubjectToken reports whether s may stand as one token of a NATS subject:
// not empty, printable ASCII, no '.', '*', '>' or whitespace.
func IsSubjectToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '.' || c == '*' || c == '>' {
			return false
		}
	}
	return true
}

// Account classes: the first segment of an address.
const (
	ClassBank     = "bank"
	ClassRenter   = "renter"
	ClassProvider = "provider"
	ClassTax      = "tax"
	ClassPlatform = "platform"
)

// Provider sub-accounts.
const (
	SubPending   = "pending"
	SubAvailable = "available"
	SubInTransit = "in_transit"
)

// Well-known addresses (DESIGN §4).
const (
	BankClient         = "bank:client"
	BankOperating      = "bank:operating"
	PlatformCommission = "platform:revenue:commission"
	// PlatformBadDebt is the house's expense of a renter's debt written
	// off: the only account a write-off debits (a departed renter's debit
	// balance can be cleared only against the house's own money).
	PlatformBadDebt = "platform:expense:bad_debt"
)

// RenterWallet is renter:{id}:wallet.
func RenterWallet(renter string) string { return "renter:" + renter + ":wallet" }

// ProviderPending is provider:{id}:pending:{cycle}.
func ProviderPending(provider, cycle string) string {
	return "provider:" + provider + ":" + SubPending + ":" + cycle
}

// ProviderAvailable is provider:{id}:available.
func ProviderAvailable(provider string) string { return "provider:" + provider + ":" + SubAvailable }

// ProviderInTransit is provider:{id}:in_transit.
func ProviderInTransit(provider string) string { return "provider:" + provider + ":" + SubInTransit }

// TaxWithheld is tax:withheld:{jurisdiction}.
func TaxWithheld(jurisdiction string) string { return "tax:withheld:" + jurisdiction }

// Address is a parsed account address.
type Address struct {
	Class string
	// Party is the renter or provider id, or the tax jurisdiction.
	Party string
	// Sub is the provider sub-account (pending, available, in_transit).
	Sub string
	// Cycle is the settlement cycle of a provider pending account.
	Cycle string
}

const (
	wantProvider = "want provider:{id}:pending:{cycle}, provider:{id}:available or provider:{id}:in_transit"
)

// ParseAddress checks an address against the chart of accounts (DESIGN §4)
// and the party, jurisdiction and cycle grammar.
func ParseAddress(addr string) (Address, error) {
	parts := strings.Split(addr, ":")
	bad := func(why string) (Address, error) {
		return Address{}, &GrammarError{addr, "is not an account address: " + why}
	}
	badPart := func(what string, err error) (Address, error) {
		var ge *GrammarError
		if errors.As(err, &ge) {
			return bad(what + " " + ge.Error())
		}
		return bad(what + " " + err.Error())
	}
	switch parts[0] {
	case ClassBank:
		if addr == BankClient || addr == BankOperating {
			return Address{Class: ClassBank, Sub: parts[1]}, nil
		}
		return bad("want bank:client or bank:operating")
	case ClassRenter:
		if len(parts) != 3 || parts[2] != "wallet" {
			return bad("want renter:{id}:wallet")
		}
		if err := CheckPartyID(parts[1]); err != nil {
			return badPart("renter id", err)
		}
		return Address{Class: ClassRenter, Party: parts[1]}, nil
	case ClassProvider:
		if len(parts) < 3 {
			return bad(wantProvider)
		}
		if err := CheckPartyID(parts[1]); err != nil {
			return badPart("provider id", err)
		}
		a := Address{Class: ClassProvider, Party: parts[1], Sub: parts[2]}
		switch {
		case len(parts) == 4 && parts[2] == SubPending:
			if err := CheckCycleID(parts[3]); err != nil {
				return badPart("cycle", err)
			}
			a.Cycle = parts[3]
			return a, nil
		case len(parts) == 3 && (parts[2] == SubAvailable || parts[2] == SubInTransit):
			return a, nil
		}
		return bad(wantProvider)
	case ClassTax:
		if len(parts) != 3 || parts[1] != "withheld" {
			return bad("want tax:withheld:{jurisdiction}")
		}
		if err := CheckJurisdiction(parts[2]); err != nil {
			return badPart("jurisdiction", err)
		}
		return Address{Class: ClassTax, Party: parts[2]}, nil
	case ClassPlatform:
		if addr == PlatformCommission || addr == PlatformBadDebt {
			return Address{Class: ClassPlatform}, nil
		}
		return bad("want platform:revenue:commission or platform:expense:bad_debt")
	}
	return bad("unknown account class (bank, renter, provider, tax, platform)")
}
