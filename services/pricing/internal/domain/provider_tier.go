package domain

// ProviderTier is one row of the provider-tier read model (party.updated):
// the commission tier a quote naming the provider splits by.
type ProviderTier struct {
	ProviderID string
	Tier       string
	Version    int64
}
