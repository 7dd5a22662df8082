# Build the manager: a static Go binary.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
COPY pkg/ pkg/
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd

# Run it on a small Debian with ipmitool, which the IPMI driver shells out to.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ipmitool ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
