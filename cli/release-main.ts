/**
 * Entry of a release artefact's bundled program (scripts/release.ts builds it): marks the process as the
 * release, then runs the CLI. Never run from a checkout, where bin/llmgw.js runs cli/main.ts through tsx.
 */
import { platformName, setRelease, type ReleaseInfo } from '../lib/release';

/** Filled in by the release build (esbuild `define`). */
declare const LLMGW_RELEASE: Omit<ReleaseInfo, 'program' | 'platform'>;

// One bundle serves every platform's artefact: the platform is the one this runs on.
setRelease({
  ...LLMGW_RELEASE,
  platform: platformName() ?? `${process.platform}-${process.arch}`,
  program: __filename,
});
// After setRelease, not hoisted like an import: cli/main runs its command as soon as it loads.
// eslint-disable-next-line @typescript-eslint/no-require-imports
require('./main');
