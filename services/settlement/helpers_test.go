package settlement

import (
	"log/slog"
	"time"

	settlementv1 "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	"github.com/gpubill/gpubill/services/settlement/internal/adapters"
)

func holdReq(cycle, provider string) *settlementv1.HoldProviderRequest {
	return &settlementv1.HoldProviderRequest{CycleId: cycle, ProviderId: provider, Reason: "dispute"}
}

func holdRow(cycle, provider string, held bool) adapters.Hold {
	return adapters.Hold{CycleID: cycle, ProviderID: provider, Held: held, UpdatedAt: time.Now()}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
