/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  // Each file is transpiled on its own (tsconfig's isolatedModules); `npm run typecheck` checks types.
  transform: { '^.+\\.ts$': ['ts-jest', {}] },
  testTimeout: 60000,
  globalSetup: '<rootDir>/test/globalSetup.js',
  globalTeardown: '<rootDir>/test/globalTeardown.js',
  // Each API test file gets its own database; files run in parallel on two cores.
  maxWorkers: 2,
};
