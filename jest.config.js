/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  transform: { '^.+\\.ts$': ['@swc/jest'] },
  testTimeout: 60000,
  // Each API test file gets its own database; files run in parallel on two cores.
  maxWorkers: 2,
};
