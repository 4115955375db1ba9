export * from './kinds.js';
export * from './http.js';
export * from './grpc.js';
export * from './exit-codes.js';
