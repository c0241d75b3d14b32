# peerlimit-node on an empty base: `make image` builds the static binary
# (CGO_ENABLED=0) on the host and copies it in, so building needs no image
# pull and no network. The image holds the binary and nothing else: no
# shell, no /etc/passwd, no CA certificates, no /tmp (none is needed: the
# node speaks plain gRPC/HTTP, and writes only to its --data-dir).
FROM scratch
LABEL org.opencontainers.image.title=peerlimit-node
COPY bin/peerlimit-node /peerlimit-node
# /bin/ratelimit, a symlink to it, is the command envoyproxy/ratelimit's
# image runs and Envoy Gateway's deployment names: started under that
# name, the node reads upstream's environment variables (docs/envoy.md,
# "Replace Envoy Gateway's rate limit service"). A directory COPY keeps
# the symlink a symlink.
COPY deploy/image/rootfs/ /
# The data directory's mount point (--data-dir /data), empty and the
# node's user's: a volume mounted there is writable by the node (Docker
# gives a new named volume the ownership of the directory it covers; on
# Kubernetes the pod's fsGroup does), and the root filesystem can stay
# read-only. An empty directory from the context, as there is no RUN in a
# scratch image (and the legacy builder has no COPY --chmod).
COPY --chown=65532:65532 deploy/image/data/ /data/
# Numeric, because there is no /etc/passwd to look a name up in.
USER 65532:65532
# HTTP API, gRPC API (clients and node-to-node), gossip (TCP and UDP);
# as /bin/ratelimit, upstream's ports: HTTP 8080, gRPC 8081, debug 6070.
EXPOSE 8080/tcp 9090/tcp 7946/tcp 7946/udp 8081/tcp 6070/tcp
# The node's defaults listen on every interface of the container (:8080,
# :9090, :7946); memberlist then advertises the container's private IP, the
# one on the interface with the default route (set --advertise-addr when
# that is not the one the other nodes reach). Beyond loopback, peer calls
# need authentication: run it with PEERLIMIT_CLUSTER_SECRET (or
# --cluster-secret-file, or peer TLS), or it exits saying so
# (docs/security.md).
# Exec form calling the binary itself: there is no shell or curl. /healthz
# answers 503 while the node shuts down, so it turns unhealthy as it leaves.
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=3 \
	CMD ["/peerlimit-node", "healthcheck", "--addr", "http://127.0.0.1:8080"]
# SIGTERM starts a graceful leave with handoff (--shutdown-timeout, 30 s by
# default): give the container more than that to stop.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/peerlimit-node"]
