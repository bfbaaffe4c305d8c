package domain

import "strings"

// PartyPrefix is what every account of a provider's or renter's party
// begins with: "provider:p-1:" (with its colon, so p-1's prefix is not
// p-10's).
func PartyPrefix(class Class, party string) string { return string(class) + ":" + party + ":" }

// PartyReadsWhole reports whether a provider or renter (prefix: PartyPrefix)
// reads an entry that moves accounts whole. An entry's description and
// metadata (renter_id among them) are written by finance or the posting
// service about the whole entry and may name any party ("dispute: renter
// r-9 of p-2 …"): a party reads them only when every posting of the entry
// is on its own accounts. The transaction read (GET /v1/transactions/{id})
// and a provider's statement lines both ask this, so they cannot disagree.
func PartyReadsWhole(prefix string, accounts []string) bool {
	for _, a := range accounts {
		if !strings.HasPrefix(a, prefix) {
			return false
		}
	}
	return len(accounts) > 0
}
