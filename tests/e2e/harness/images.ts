// Reads an <img> inside a webview frame: its natural size and how many distinct
// colours a sample of its pixels has (a blank or single-colour image has 1), or
// the mean brightness of its left and right halves.
import type { Frame, Locator } from 'playwright-core';

export interface ImageStats {
  naturalWidth: number;
  naturalHeight: number;
  distinctColors: number;
  complete: boolean;
}

/** The first <img> matching `selector`, once it has loaded. */
async function loadedImage(frame: Frame, selector: string): Promise<Locator> {
  const image = frame.locator(selector).first();
  await image.waitFor({ timeout: 30_000 });
  await frame.waitForFunction(
    (el) => (el as HTMLImageElement).complete && (el as HTMLImageElement).naturalWidth > 0,
    await image.elementHandle(),
    { timeout: 30_000 },
  );
  return image;
}

export interface HalvesLuma {
  left: number;
  right: number;
  width: number;
  height: number;
}

/** One read of a loaded <img>'s pixels: its size, sampled distinct colours, mean luma of each half. */
async function pixelStats(frame: Frame, selector: string): Promise<ImageStats & HalvesLuma> {
  const image = await loadedImage(frame, selector);
  return image.evaluate((el) => {
    const img = el as HTMLImageElement;
    const canvas = document.createElement('canvas');
    canvas.width = img.naturalWidth;
    canvas.height = img.naturalHeight;
    const context = canvas.getContext('2d')!;
    context.drawImage(img, 0, 0);
    const { data, width, height } = context.getImageData(0, 0, canvas.width, canvas.height);
    const colors = new Set<number>();
    const step = Math.max(1, Math.floor(data.length / 4 / 4096)) * 4; // sample ~4096 pixels
    for (let i = 0; i < data.length; i += step) colors.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
    let left = 0;
    let right = 0;
    for (let y = 0; y < height; y++) {
      for (let x = 0; x < width; x++) {
        const i = (y * width + x) * 4;
        const luma = 0.299 * data[i] + 0.587 * data[i + 1] + 0.114 * data[i + 2];
        if (x < width / 2) left += luma;
        else right += luma;
      }
    }
    const half = (width * height) / 2;
    return {
      naturalWidth: img.naturalWidth, naturalHeight: img.naturalHeight, distinctColors: colors.size, complete: img.complete,
      left: left / half, right: right / half, width, height,
    };
  });
}

export async function imageStats(frame: Frame, selector: string): Promise<ImageStats> {
  const { naturalWidth, naturalHeight, distinctColors, complete } = await pixelStats(frame, selector);
  return { naturalWidth, naturalHeight, distinctColors, complete };
}

/** Mean luma (0-255) of the left and right halves of a loaded <img>. */
export async function imageHalvesLuma(frame: Frame, selector: string): Promise<HalvesLuma> {
  const { left, right, width, height } = await pixelStats(frame, selector);
  return { left, right, width, height };
}
