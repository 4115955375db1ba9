// One example per client command, by its path (`snapshot create`): docs/cli.md shows them, and the doc's
// test fails for a command without one.
export const EXAMPLES: Record<string, string> = {
  auth: 'aenv auth                                   # asks for the URL and the key\necho "$KEY" | aenv auth --url http://node:8000',
  list: 'aenv list\naenv ls --state paused --metadata team=rl -o json',
  start:
    'aenv start base                             # a shell in a new sandbox\nID=$(aenv start -d --timeout 3600 --env MODE=eval base)',
  connect: 'aenv connect "$ID"',
  pause: 'aenv pause "$ID"',
  resume: 'aenv resume --timeout 600 "$ID"',
  timeout: 'aenv timeout "$ID" 3600',
  fork: 'aenv fork "$ID" --count 4 -o json | jq -r \'.[].sandbox.sandboxID\'',
  delete: 'aenv rm "$ID"',
  exec: 'aenv exec "$ID" ls -la /tmp\naenv exec --user root --cwd /srv --env A=1 "$ID" sh -c \'echo $A > out\'\ntar c . | aenv exec "$ID" tar x -C /work\naenv exec -t "$ID" top',
  upload: 'aenv upload "$ID" ./data /home/user/data',
  download: 'aenv download "$ID" /home/user/results ./results',
  'snapshot create': 'aenv snapshot create "$ID" --name warmed-up\naenv start -d warmed-up',
  'snapshot list': 'aenv snapshot list --sandbox-id "$ID"',
  'snapshot delete': 'aenv snapshot rm warmed-up',
  'webhook create':
    'printf \'%s\' "$SECRET" > secret && aenv webhook create https://hooks.example.test/e2b --event created,killed --secret-file secret',
  'webhook list': 'aenv webhook ls -o table',
  'webhook get': 'aenv webhook get "$WEBHOOK_ID"',
  'webhook update': 'aenv webhook update "$WEBHOOK_ID" --event paused,resumed --disable',
  'webhook delete': 'aenv webhook rm "$WEBHOOK_ID"',
  'webhook deliveries': 'aenv webhook deliveries "$WEBHOOK_ID" --status failed -o table',
  pull: 'aenv pull docker.io/library/python:3.12 --name py --cpu 2 --memory 2048\naenv pull nginx:1.27 --start-cmd nginx --probe 80 -d',
  build:
    'aenv build --name web ./Dockerfile                 # waits, build log streaming\naenv build --name web --build-arg VERSION=2 -c . docker/Dockerfile -d',
  'template build': 'aenv template build --name web --image python:3.12 .',
  'template list': 'aenv template list -o table',
  'template delete': 'aenv template rm py',
  'template watch': 'aenv template watch py',
  logs: 'aenv logs "$ID"\naenv logs -f --level warn "$ID"',
  metrics: 'aenv metrics --since 60 "$ID"',
  nodes: 'aenv nodes',
  'node drain': 'aenv node drain node-a --wait',
  completion: 'eval "$(aenv completion bash)"        # in ~/.bashrc\naenv completion fish | source',
};
