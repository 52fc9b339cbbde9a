/** Unit, integration and e2e tests share one config; integration tests bring their own servers. */
module.exports = {
  testEnvironment: 'node',
  transform: { '^.+\\.ts$': 'ts-jest' },
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  testTimeout: 120000,
  maxWorkers: 2,
  setupFiles: ['<rootDir>/test/setup.ts'],
};
