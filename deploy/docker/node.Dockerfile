# The node image (`aenv server`): the control-plane image plus CRIU (in its own prefix, patched for
# /opt/aenv/criu) and the `base` template image, so a node starts without any registry.
#   context/criu     the CRIU prefix of this host's scripts/setup-host.sh, relocated
#   context/tools    the sandbox tools dir (/agentenv: envd, node, aenv-init), built on this host
#   context/images   the OCI layout of scripts/build-base-image.sh
ARG CONTROL=aenv/aenv:local
FROM ${CONTROL}
USER 0:0
COPY criu /opt/aenv/criu
COPY tools /opt/aenv/tools
COPY images/base /var/cache/aenv/images/base
# The node must be root with every capability (runc, CRIU, mounts, nftables, uid-shifted layers):
# run it privileged (docs/cluster.md#compose).
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/aenv-entrypoint"]
CMD ["server", "--config", "/etc/aenv/node.toml"]
