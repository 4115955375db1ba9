// Flag value parsers: a bad value is a usage error naming the flag (commander prints it and exits 2).
import { InvalidArgumentError } from 'commander';

/** An integer in [min, max]. */
export function intIn(min: number, max: number): (raw: string) => number {
  return (raw) => {
    if (!/^-?\d+$/.test(raw.trim()))
      throw new InvalidArgumentError(`${JSON.stringify(raw)} is not an integer`);
    const n = Number(raw);
    if (n < min || n > max) throw new InvalidArgumentError(`${n} is not in ${min}..${max}`);
    return n;
  };
}

/** Seconds for a timeout: 0..int32. */
export const seconds = intIn(0, 2_147_483_647);

/** A repeatable `KEY=VALUE` flag, collected into a map. */
export function keyValue(raw: string, acc: Record<string, string> = {}): Record<string, string> {
  const eq = raw.indexOf('=');
  if (eq <= 0) throw new InvalidArgumentError(`${JSON.stringify(raw)} is not KEY=VALUE`);
  return { ...acc, [raw.slice(0, eq)]: raw.slice(eq + 1) };
}

/** A repeatable string flag, collected into a list. */
export const collect = (raw: string, acc: string[] = []): string[] => [...acc, raw];
