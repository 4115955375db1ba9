// `${e2b.…}` placeholders in `network.rules` header values (docs/networking.md#secrets). The E2B SDK writes two
// kinds: `${e2b.secrets.<name>}` (`Secret.fill`) and `${e2b.identity.tokens.<name>}` (workload identity tokens,
// `iam.tokens`). aenv fills the first from `/secrets` at egress; any other text that opens like a placeholder is
// refused at create and update (policy.ts), and fails the request at egress should a stored policy hold one, so a
// placeholder never reaches an upstream as literal text.

/** A `/secrets` name as the API stores it (lowercased; `sec_` is for ids). Dots are left out: see `SECRET_NAME_INPUT`. */
export const SECRET_NAME = /^[a-z0-9][a-z0-9_-]{0,127}$/;
/** What the API takes as a name (it lowercases it): the same letters in either case. */
const SECRET_NAME_INPUT = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

const SECRET_OPEN = '${e2b.secrets.';
const IDENTITY_OPEN = '${e2b.identity.tokens.';
/** Whatever a reader could take for a placeholder: `${`, optional blanks, `e2b.` in any case. */
const OPENING = /\$\{\s*e2b\./gi;

/** One `${e2b.secrets.<name>}` in a value: where it is and the secret it names (lowercased, as stored). */
export interface SecretPlaceholder {
  start: number;
  end: number;
  secret: string;
}

/**
 * The secret placeholders of `value`, or why it holds a placeholder aenv does not fill. The reason names the kind,
 * never the value's text (header values are credentials).
 */
export function parsePlaceholders(value: string): SecretPlaceholder[] | { problem: string } {
  const found: SecretPlaceholder[] = [];
  OPENING.lastIndex = 0;
  for (let m = OPENING.exec(value); m !== null; m = OPENING.exec(value)) {
    const start = m.index;
    if (value.startsWith(IDENTITY_OPEN, start))
      return {
        problem:
          'a ${e2b.identity.tokens.<name>} placeholder (workload identity tokens) is not supported by this server; use a /secrets secret as ${e2b.secrets.<name>}',
      };
    if (!value.startsWith(SECRET_OPEN, start))
      return {
        problem: 'the value holds an unknown ${e2b.…} placeholder; only ${e2b.secrets.<name>} is supported',
      };
    const close = value.indexOf('}', start + SECRET_OPEN.length);
    if (close < 0) return { problem: 'the value holds a ${e2b.secrets.… placeholder that is never closed' };
    const name = value.slice(start + SECRET_OPEN.length, close);
    if (!SECRET_NAME_INPUT.test(name))
      return {
        problem:
          'a ${e2b.secrets.<name>} placeholder needs the name of a secret: 1 to 128 letters, digits, "-" or "_", starting with a letter or digit',
      };
    found.push({ start, end: close + 1, secret: name.toLowerCase() });
    OPENING.lastIndex = close + 1;
  }
  return found;
}

/**
 * `value` with each secret placeholder replaced by the secret's value, in one pass (a value that itself holds a
 * placeholder is not filled again). `problem`: a placeholder that is not filled, or the first secret `valueOf`
 * does not know.
 */
export function fillPlaceholders(
  value: string,
  valueOf: (secret: string) => string | undefined,
): { filled: string } | { problem: string; secret?: string } {
  const parsed = parsePlaceholders(value);
  if (!Array.isArray(parsed)) return parsed;
  if (parsed.length === 0) return { filled: value };
  let out = '';
  let at = 0;
  for (const p of parsed) {
    const v = valueOf(p.secret);
    if (v === undefined)
      return {
        problem: `names secret ${p.secret}, which does not exist or cannot be read`,
        secret: p.secret,
      };
    out += value.slice(at, p.start) + v;
    at = p.end;
  }
  return { filled: out + value.slice(at) };
}
