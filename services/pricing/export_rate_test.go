package pricing

import (
	"context"

	"github.com/gpubill/gpubill/services/pricing/internal/app"
)

// RateMessages rates a fetched batch as the usage.recorded consumer does.
func (s *Service) RateMessages(ctx context.Context, msgs []app.UsageMessage) error {
	return s.app.RateMessages(ctx, msgs)
}
