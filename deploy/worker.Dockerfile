# The sandq worker, API and CLI as an image, for docker-compose.yml. The worker talks to the host's
# engine through the mounted socket and runs sandboxes as siblings, never inside this container.
# Needs a registry (golang and debian base images); on a machine without one, run bin/worker
# on the host instead (make demo does).
ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/worker ./cmd/worker && \
    CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/enqueue ./cmd/enqueue && \
    CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/api ./cmd/api

FROM ${BASE}
COPY --from=build /out/worker /out/enqueue /out/api /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/worker"]
