package simulate

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Limits of the check for parties the simulation did not create.
const (
	partyPageSize  = 100
	foreignShowMax = 5 // ids named in the refusal, per kind
)

// ownNames are the parties a simulation run creates, by id, with their
// names: a party carrying one of these ids under another name is not the
// simulation's (seeding takes its 409 for "already there").
func ownNames() map[string]string {
	own := map[string]string{thinRenter: thinName}
	for _, p := range providers {
		own[p.ID] = p.Name
	}
	for _, r := range renters {
		own[r] = renterName(r)
	}
	return own
}

// checkOwnStack refuses a stack holding renters or providers the
// simulation did not create: its deposits have no money behind them, so
// against a real stack (a port-forward to production on the default URL)
// they would book fake client money, then fake charges and commission.
func checkOwnStack(ctx context.Context, c *client) error {
	own := ownNames()
	var found []string
	for _, kind := range []string{"renters", "providers"} {
		ids, err := foreignParties(ctx, c, "/v1/"+kind, own)
		if err != nil {
			return fmt.Errorf("list the %s of %s: %w", kind, c.base, err)
		}
		if len(ids) > 0 {
			found = append(found, kind+" "+strings.Join(ids, ", "))
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("%s holds parties the simulation did not create (%s): the simulation books deposits "+
			"no money stands behind, so it runs only against a stack of its own (--force to run anyway)",
			c.base, strings.Join(found, "; "))
	}
	return nil
}

// partyPage is one page of GET /v1/renters or GET /v1/providers.
type partyPage struct {
	Renters   []listedParty `json:"renters"`
	Providers []listedParty `json:"providers"`
	Next      string        `json:"next_page_token"`
}

type listedParty struct {
	RenterID   string `json:"renter_id"`
	ProviderID string `json:"provider_id"`
	Name       string `json:"name"`
}

// foreignParties pages through one party listing (ordered by id) and
// returns the first foreignShowMax ids that are not the simulation's, with
// "…" when there are more.
func foreignParties(ctx context.Context, c *client, path string, own map[string]string) ([]string, error) {
	var ids []string
	q := url.Values{"page_size": {strconv.Itoa(partyPageSize)}}
	for {
		var page partyPage
		if err := c.get(ctx, path+"?"+q.Encode(), &page); err != nil {
			return nil, err
		}
		for _, p := range append(page.Renters, page.Providers...) {
			id := p.RenterID + p.ProviderID // one of them is set
			if name, ok := own[id]; ok && name == p.Name {
				continue
			}
			if len(ids) == foreignShowMax {
				return append(ids, "…"), nil
			}
			ids = append(ids, id)
		}
		if page.Next == "" {
			return ids, nil
		}
		q.Set("page_token", page.Next)
	}
}
