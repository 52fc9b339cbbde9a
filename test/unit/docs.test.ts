/** The operator docs stay true to the code: every error code is documented, and no documented code is gone. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ERRORS } from '../../lib/errors';

test('docs/errors.md documents exactly the codes of lib/errors.ts', () => {
  const text = readFileSync(join(__dirname, '../../docs/errors.md'), 'utf8');
  const documented = [...text.matchAll(/^\| `(LLMGW_[A-Z_]+)`/gm)].map((m) => m[1]).sort();
  expect(documented).toEqual(Object.keys(ERRORS).sort());
});
