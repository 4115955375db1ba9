export { runServer, type RunServerOptions } from './server.js';
