/** Catching the error a call must throw, with its catalogue code. */
import { hasCode, type ErrorCode } from '../../lib/errors';

/** Runs `fn`, asserts it throws an error carrying `code`, and returns that error. */
export function thrownWithCode<E extends Error = Error>(fn: () => unknown, code: ErrorCode): E {
  try {
    fn();
  } catch (err) {
    expect(hasCode(err, code)).toBe(true);
    return err as E;
  }
  throw new Error(`expected a throw with code ${code}`);
}
