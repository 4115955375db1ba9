// Bundles envd into one CommonJS file (dist/envd.cjs) for the tools dir. node-pty stays external: its
// JS and native module are copied next to the bundle by ensureToolsDir.
//   node scripts/bundle.mjs [--out <file>]
import { build } from 'esbuild';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkgRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outIndex = process.argv.indexOf('--out');
const outfile = outIndex > 0 ? resolve(process.argv[outIndex + 1]) : join(pkgRoot, 'dist', 'envd.cjs');
const require = createRequire(join(pkgRoot, 'package.json'));

// The protocol package and envd each have a copy of @bufbuild/protobuf: bundle exactly one (envd's). Of the
// protocol, envd takes only its own wire contract (`@aenv/protocol/envd`): the whole package would bring the
// control plane's schemas (zod) and the node's clients into every sandbox's memory.
const singleProtobuf = {
  name: 'single-protobuf',
  setup(b) {
    b.onResolve({ filter: /^@bufbuild\/protobuf(\/.*)?$/ }, (args) => ({ path: require.resolve(args.path) }));
    b.onResolve({ filter: /^@aenv\/protocol(\/.*)?$/ }, (args) =>
      args.path === '@aenv/protocol/envd'
        ? { path: join(pkgRoot, '..', 'protocol', 'src', 'envd', 'index.ts') }
        : { errors: [{ text: `envd imports ${args.path}; it may import only @aenv/protocol/envd` }] },
    );
  },
};

await build({
  entryPoints: [join(pkgRoot, 'src', 'main.ts')],
  outfile,
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  minify: true,
  keepNames: false,
  legalComments: 'none',
  external: ['node-pty'],
  plugins: [singleProtobuf],
  logLevel: 'warning',
  logOverride: { 'empty-import-meta': 'silent' },
});
console.log(`bundled envd -> ${outfile}`);
