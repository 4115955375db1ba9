// Kubernetes label selectors (`scheduler.discovery.kubernetes.{ignore,no_schedule}_pod_selector`) are sent to
// the API server as given; they are checked at startup so a typo fails loudly instead of matching nothing.
// Grammar: comma-separated requirements `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (v,…)`, `k notin (v,…)`.
const NAME = '[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?';
const KEY = new RegExp(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?${NAME}$`);
const VALUE = new RegExp(`^(${NAME})?$`);

function checkKey(key: string, selector: string): void {
  const prefix = key.includes('/') ? key.slice(0, key.indexOf('/')) : '';
  if (!KEY.test(key) || prefix.length > 253)
    throw new Error(`invalid label key ${JSON.stringify(key)} in selector ${JSON.stringify(selector)}`);
}

function checkValue(value: string, selector: string): void {
  if (!VALUE.test(value))
    throw new Error(`invalid label value ${JSON.stringify(value)} in selector ${JSON.stringify(selector)}`);
}

/** Throws with the offending part when `selector` is not a valid label selector (empty = none, valid). */
export function checkLabelSelector(selector: string): void {
  const s = selector.trim();
  if (s === '') return;
  // Split on commas outside parentheses.
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '(') depth++;
    else if (s[i] === ')') depth--;
    else if (s[i] === ',' && depth === 0) {
      parts.push(s.slice(start, i));
      start = i + 1;
    }
    if (depth < 0 || depth > 1)
      throw new Error(`unbalanced parentheses in selector ${JSON.stringify(selector)}`);
  }
  if (depth !== 0) throw new Error(`unbalanced parentheses in selector ${JSON.stringify(selector)}`);
  parts.push(s.slice(start));
  for (const raw of parts) {
    const part = raw.trim();
    const set = /^(\S+)\s+(in|notin)\s*\(([^()]*)\)$/.exec(part);
    if (set) {
      checkKey(set[1]!, selector);
      for (const v of set[3]!.split(',')) checkValue(v.trim(), selector);
      continue;
    }
    const eq = /^([^=!\s]+)\s*(==|=|!=)\s*([^=!\s]*)$/.exec(part);
    if (eq) {
      checkKey(eq[1]!, selector);
      checkValue(eq[3]!, selector);
      continue;
    }
    const exists = /^(!?)\s*([^=!\s()]+)$/.exec(part);
    if (exists) {
      checkKey(exists[2]!, selector);
      continue;
    }
    throw new Error(`invalid requirement ${JSON.stringify(part)} in selector ${JSON.stringify(selector)}`);
  }
}
