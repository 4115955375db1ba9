// Imported first by main.ts, so that the bundle's @bufbuild/protobuf finds a native toBase64 when it loads.
import { installNativeToBase64 } from './native-base64.js';

installNativeToBase64();
