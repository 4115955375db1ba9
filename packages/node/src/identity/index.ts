export {
  resolveNodeIdentity,
  systemHostname,
  serverVersion,
  type NodeIdentity,
  type NodeIdentitySettings,
  type ResolveNodeIdentityOptions,
} from './node-identity.js';
export { readMachineInfo, parseCpuInfo, architectureName, type MachineInfo } from './machine-info.js';
