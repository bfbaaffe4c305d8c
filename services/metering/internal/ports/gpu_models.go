package ports

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/gpucatalog"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	"github.com/gpubill/gpubill/services/metering/internal/app"
	"github.com/gpubill/gpubill/services/metering/internal/domain"
)

// GPUModelServer serves GpuModelService.
type GPUModelServer struct {
	meteringv1.UnimplementedGpuModelServiceServer
	Catalogue *app.Catalogue
}

func gpuModelPB(m domain.GPUModel) *meteringv1.GpuModel {
	return &meteringv1.GpuModel{GpuModel: m.ID, Vendor: m.Vendor, MemoryGb: int32(m.MemoryGB), DisplayName: m.DisplayName,
		Aliases: m.Aliases, Version: m.Version, UpdatedAt: timestamppb.New(m.UpdatedAt)}
}

// ListGpuModels implements GpuModelService.
func (s *GPUModelServer) ListGpuModels(ctx context.Context, r *meteringv1.ListGpuModelsRequest) (*meteringv1.ListGpuModelsResponse, error) {
	ms, err := s.Catalogue.List(ctx, r.Vendor)
	if err != nil {
		return nil, err
	}
	out := &meteringv1.ListGpuModelsResponse{Models: make([]*meteringv1.GpuModel, 0, len(ms))}
	for _, m := range ms {
		out.Models = append(out.Models, gpuModelPB(m))
	}
	return out, nil
}

// CreateGpuModel implements GpuModelService.
func (s *GPUModelServer) CreateGpuModel(ctx context.Context, r *meteringv1.CreateGpuModelRequest) (*meteringv1.CreateGpuModelResponse, error) {
	m, err := s.Catalogue.Put(ctx, gpucatalog.Model{ID: r.GpuModel, Vendor: r.Vendor, MemoryGB: int(r.MemoryGb),
		DisplayName: r.DisplayName, Aliases: append([]string(nil), r.Aliases...)})
	if err != nil {
		return nil, err
	}
	return &meteringv1.CreateGpuModelResponse{Model: gpuModelPB(m)}, nil
}
