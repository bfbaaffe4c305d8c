# One image per service: docker build --build-arg SERVICE=ledger -t gpubill/ledger .
FROM golang:1.26-bookworm AS build
ARG SERVICE=gpubill
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/root/.cache/go-build --mount=type=cache,target=/go/pkg/mod \
    CGO_ENABLED=0 go build -trimpath -o /out/app ./services/${SERVICE}/cmd/${SERVICE}

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/app /app
# By number (distroless's nonroot): the kubelet cannot tell whether a named
# user is root, so it refuses a pod with runAsNonRoot (the Helm chart's).
USER 65532:65532
ENTRYPOINT ["/app"]
