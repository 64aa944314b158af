// Reads an <img> inside a webview frame: its natural size and how many distinct
// colours a sample of its pixels has (a blank or single-colour image has 1).
import type { Frame } from 'playwright-core';

export interface ImageStats {
  naturalWidth: number;
  naturalHeight: number;
  distinctColors: number;
  complete: boolean;
}

export async function imageStats(frame: Frame, selector: string): Promise<ImageStats> {
  const image = frame.locator(selector).first();
  await image.waitFor({ timeout: 30_000 });
  await frame.waitForFunction(
    (el) => (el as HTMLImageElement).complete && (el as HTMLImageElement).naturalWidth > 0,
    await image.elementHandle(),
    { timeout: 30_000 },
  );
  return image.evaluate((el) => {
    const img = el as HTMLImageElement;
    const canvas = document.createElement('canvas');
    canvas.width = img.naturalWidth;
    canvas.height = img.naturalHeight;
    const context = canvas.getContext('2d')!;
    context.drawImage(img, 0, 0);
    const data = context.getImageData(0, 0, canvas.width, canvas.height).data;
    const colors = new Set<number>();
    const step = Math.max(1, Math.floor(data.length / 4 / 4096)) * 4; // sample ~4096 pixels
    for (let i = 0; i < data.length; i += step) colors.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
    return { naturalWidth: img.naturalWidth, naturalHeight: img.naturalHeight, distinctColors: colors.size, complete: img.complete };
  });
}
