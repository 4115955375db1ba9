// Config that makes a test node's docker.io the local test registry, which holds aenv/base under Docker Hub names
// (library/ubuntu:22.04, e2bdev/base:latest; test/services/start.sh). Tests never reach Docker Hub itself.

/** `[image.resolver]` of a node whose docker.io mirror is the local registry (`AENV_TEST_REGISTRY`). */
export function dockerHubMirrorToml(): string {
  const registry = process.env.AENV_TEST_REGISTRY ?? '127.0.0.1:5000';
  return [
    '[image.resolver]',
    `insecure_registries = ["docker.io", "${registry}"]`,
    `registry_endpoints = ["docker.io=http://${registry}"]`,
    '',
  ].join('\n');
}
