// `npm run test:faults`: the fault scenarios (test/faults), one file and one scenario at a time; they start
// their own NATS clusters and hookstream processes, so running them beside other tests would skew the timings.
export default {
  extensions: ['ts'],
  files: ['test/faults/*.test.ts'],
  timeout: '300s',
  workerThreads: false,
  concurrency: 1,
};
