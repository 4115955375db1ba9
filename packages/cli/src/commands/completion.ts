// `aenv completion bash|zsh|fish`: a completion script generated from the command tree itself, so it knows
// every command, alias and flag this build has.
import { Argument, type Command } from 'commander';

interface Node {
  /** `aenv_snapshot_create`: the path of names, joined. */
  key: string;
  names: string[];
  description: string;
  subcommands: Node[];
  flags: { long?: string; short?: string; description: string }[];
}

function tree(cmd: Command, prefix = 'aenv'): Node {
  const visible = cmd.commands.filter((c) => !(c as unknown as { _hidden?: boolean })._hidden);
  return {
    key: prefix,
    names: [cmd.name(), ...cmd.aliases()],
    description: cmd.description(),
    subcommands: visible.map((c) => tree(c, `${prefix}_${c.name()}`)),
    flags: cmd.options
      .filter((o) => !o.hidden)
      .map((o) => ({
        ...(o.long ? { long: o.long } : {}),
        ...(o.short ? { short: o.short } : {}),
        description: o.description,
      }))
      .concat([{ long: '--help', short: '-h', description: 'show help' }]),
  };
}

function all(n: Node): Node[] {
  return [n, ...n.subcommands.flatMap(all)];
}

const sq = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** Shell functions shared by bash and zsh: which words follow a command path, and which names are commands. */
function posixHelpers(root: Node): string {
  const nodes = all(root);
  const words = nodes.map((n) => {
    const ws = [
      ...n.subcommands.flatMap((s) => s.names),
      ...n.flags.flatMap((f) => [f.long, f.short]),
    ].filter((w): w is string => !!w);
    return `    ${n.key}) echo ${sq(ws.join(' '))} ;;`;
  });
  const children = nodes.flatMap((n) =>
    n.subcommands.flatMap((s) => s.names.map((name) => `    ${n.key}_${name}) echo ${s.key} ;;`)),
  );
  return [
    '_aenv_words() {',
    '  case "$1" in',
    ...words,
    '  esac',
    '}',
    '# The command a name names under a path (aliases resolve to the command), or nothing.',
    '_aenv_child() {',
    '  case "$1" in',
    ...children,
    '  esac',
    '}',
  ].join('\n');
}

function bash(root: Node): string {
  return `# aenv completion for bash: eval "$(aenv completion bash)" (e.g. in ~/.bashrc)
${posixHelpers(root)}
_aenv() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" cmd=aenv w next i
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    [[ "$w" == -* ]] && continue
    next="$(_aenv_child "\${cmd}_\${w}")"
    [[ -n "$next" ]] && cmd="$next"
  done
  COMPREPLY=($(compgen -W "$(_aenv_words "$cmd")" -- "$cur"))
}
complete -o default -F _aenv aenv
`;
}

function zsh(root: Node): string {
  return `#compdef aenv
# aenv completion for zsh: eval "$(aenv completion zsh)" (after compinit), or save as _aenv on $fpath
${posixHelpers(root)}
_aenv() {
  local cmd=aenv w next
  for w in "\${(@)words[2,CURRENT-1]}"; do
    [[ "$w" == -* ]] && continue
    next="$(_aenv_child "\${cmd}_\${w}")"
    [[ -n "$next" ]] && cmd="$next"
  done
  local -a candidates
  candidates=(\${(z)"$(_aenv_words "$cmd")"})
  compadd -- "\${candidates[@]}"
  _files
}
if [[ "$funcstack[1]" == "_aenv" ]]; then _aenv "$@"; else compdef _aenv aenv; fi
`;
}

function fish(root: Node): string {
  const lines = ['# aenv completion for fish: aenv completion fish | source', 'complete -c aenv -f'];
  const walk = (n: Node, path: Node[]) => {
    // The condition "we are at node n": its path's names seen, none of its children's yet.
    const seen = path.slice(1).map((p) => `__fish_seen_subcommand_from ${p.names.join(' ')}`);
    const here = seen.length ? seen.join('; and ') : '__fish_use_subcommand';
    const childNames = n.subcommands.flatMap((s) => s.names);
    const at =
      childNames.length && seen.length
        ? `${here}; and not __fish_seen_subcommand_from ${childNames.join(' ')}`
        : here;
    for (const s of n.subcommands) {
      for (const name of s.names)
        lines.push(`complete -c aenv -n ${sq(at)} -a ${sq(name)} -d ${sq(s.description)}`);
    }
    for (const f of n.flags) {
      const parts = [
        ...(f.long ? [`-l ${f.long.replace(/^--/, '')}`] : []),
        ...(f.short ? [`-s ${f.short.replace(/^-/, '')}`] : []),
      ];
      lines.push(`complete -c aenv -n ${sq(at)} ${parts.join(' ')} -d ${sq(f.description)}`);
    }
    for (const s of n.subcommands) walk(s, [...path, s]);
  };
  walk(root, [root]);
  return lines.join('\n') + '\n';
}

export const SHELLS = { bash, zsh, fish } as const;

export function completionScript(program: Command, shell: keyof typeof SHELLS): string {
  return SHELLS[shell](tree(program));
}

export function registerCompletionCommand(program: Command): void {
  program
    .command('completion')
    .addArgument(new Argument('<shell>', 'the shell').choices(Object.keys(SHELLS)))
    .description('print a shell completion script (bash, zsh, fish)')
    .action((shell: keyof typeof SHELLS) => {
      process.stdout.write(completionScript(program, shell));
    });
}
