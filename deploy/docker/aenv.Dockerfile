# The control-plane image (gateway, scheduler, Redis) of the Compose cluster. Built by
# scripts/cluster-compose.sh FROM a rootfs it imports from mmdebstrap (no registry is contacted):
#   context/app      the built aenv tree (dist + production node_modules)
#   context/bin      the node binary and the entrypoint
ARG ROOTFS=aenv/rootfs:bookworm
FROM ${ROOTFS}
COPY bin/node /usr/local/bin/node
COPY bin/aenv-entrypoint bin/aenv-generate-secrets /usr/local/bin/
COPY app /opt/aenv
# Unprivileged: the gateway and the scheduler need no capability and no writable file.
RUN groupadd --system --gid 10001 aenv && \
    useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin aenv
USER 10001:10001
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/aenv-entrypoint"]
CMD ["--help"]
